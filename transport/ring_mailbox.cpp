// The two ends of a ring mailbox (Note [Ring mailboxes] in the header).
#include "transport/ring_mailbox.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>

namespace troupe::shm {

namespace {

// After the segment's own header: the control line (what the receiver released), then
// the pieces, each a header line and its floats.
constexpr std::size_t control_bytes = 64, piece_header = 64, data_start = header_bytes + control_bytes;

struct piece_head {
  std::uint64_t ticket = 0;
  std::int64_t numel = 0;
};

std::size_t round64(std::size_t n) { return (n + 63) / 64 * 64; }

std::atomic_ref<std::uint64_t> released_of(const segment& s) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(s.data() + header_bytes));
}

}  // namespace

std::size_t ring_outbox::bytes_for(std::int64_t numel) {
  return piece_header + round64(static_cast<std::size_t>(std::max<std::int64_t>(numel, 0)) * sizeof(float));
}

expected<ring_outbox> ring_outbox::create(std::string_view tag, std::size_t capacity, std::uint64_t label) {
  ring_outbox o;
  o.capacity_ = round64(std::max<std::size_t>(capacity, piece_header));
  auto seg = segment::create(tag, data_start + o.capacity_, label);
  if (!seg) return failure{"cannot make a ring mailbox: " + seg.error().message};
  o.seg_ = std::move(*seg);
  return o;
}

void ring_outbox::accepted() {
  if (closed_) return;
  accepted_ = true;
  seg_.unlink();
}

void ring_outbox::close() {
  closed_ = true;
  seg_.unlink();
}

std::uint64_t ring_outbox::released() {
  const std::uint64_t r = released_of(seg_).load(std::memory_order_acquire);
  if (r < last_released_ || r > sealed_) {
    close();  // the receiver wrote nonsense: trust the mailbox no more
    return last_released_;
  }
  return last_released_ = r;
}

std::uint64_t ring_outbox::in_use() const { return written_ - last_released_; }

std::optional<ring_outbox::lent> ring_outbox::reserve(std::int64_t numel) {
  if (!usable() || numel < 0) return std::nullopt;
  const std::size_t need = bytes_for(numel);
  if (need > capacity_) return std::nullopt;
  std::uint64_t pos = written_;
  if (pos % capacity_ + need > capacity_) pos += capacity_ - pos % capacity_;  // pieces never wrap
  const std::uint64_t end = pos + need;
  if (end - released() > capacity_ || closed_) return std::nullopt;
  written_ = end;
  const std::uint64_t offset = data_start + pos % capacity_;
  return lent{seg_.data() + offset + piece_header, offset, end, numel};
}

shared_tensor ring_outbox::stamp(const lent& l) {
  const piece_head h{l.end, l.numel};
  std::memcpy(seg_.data() + l.offset, &h, sizeof h);
  sealed_ = l.end;
  return shared_tensor{seg_.name(), l.offset, bytes_for(l.numel), l.end, static_cast<std::uint8_t>(dtype::f32),
                       {l.numel}};
}

tensor ring_outbox::lend(std::int64_t numel) {
  auto l = reserve(numel);
  if (!l) return tensor{};
  lent_.push_back(*l);
  return tensor::adopt(l->data, buffer_release{}, {numel}, dtype::f32, cpu_device);
}

bool ring_outbox::holds(const std::byte* data) const {
  return std::any_of(lent_.begin(), lent_.end(), [&](const lent& l) { return l.data == data; });
}

std::optional<shared_tensor> ring_outbox::seal(const_tensor_view filled) {
  const auto it = std::find_if(lent_.begin(), lent_.end(),
                               [&](const lent& l) { return l.data == filled.bytes(); });
  if (it == lent_.end()) return std::nullopt;
  const lent l = *it;
  lent_.erase(lent_.begin(), it + 1);
  // A piece put() or sealed after this one was lent went first: tickets must rise.
  if (!usable() || l.end <= sealed_ || filled.numel() != l.numel) return std::nullopt;
  return stamp(l);
}

void ring_outbox::abandon(const std::byte* data) {
  std::erase_if(lent_, [&](const lent& l) { return l.data == data; });
}

std::optional<shared_tensor> ring_outbox::put(const_tensor_view values) {
  if (values.type() != dtype::f32 || !values.is_contiguous()) return std::nullopt;
  auto l = reserve(values.numel());
  if (!l) return std::nullopt;
  if (values.numel() > 0) std::memcpy(l->data, values.bytes(), values.nbytes());
  return stamp(*l);
}

// The receiver's end. Its state outlives the ring_inbox while pieces taken from it live.
struct ring_inbox::state {
  struct held {
    const std::byte* data = nullptr;
    std::uint64_t end = 0;
    bool done = false;
  };
  std::mutex mu;
  segment seg;
  std::uint64_t last_ticket = 0;
  std::deque<held> pieces;  // taken and not yet released, in the order taken
  bool orphaned = false;

  // A piece's tensor is destroyed: release every piece up to the first still held.
  static void piece_done(void* ctx, std::byte* data) {
    auto* s = static_cast<state*>(ctx);
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      for (auto& p : s->pieces)
        if (p.data == data && !p.done) {
          p.done = true;
          break;
        }
      std::uint64_t released = 0;
      while (!s->pieces.empty() && s->pieces.front().done) {
        released = s->pieces.front().end;
        s->pieces.pop_front();
      }
      if (released != 0) released_of(s->seg).store(released, std::memory_order_release);
      last = s->orphaned && s->pieces.empty();
    }
    if (last) delete s;
  }
};

void ring_inbox::orphan::operator()(state* s) const {
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->orphaned = true;
    last = s->pieces.empty();
  }
  if (last) delete s;
}

ring_inbox::~ring_inbox() = default;

expected<ring_inbox> ring_inbox::open(std::string_view name, std::string_view tag, std::uint64_t label) {
  auto seg = segment::open(name, tag);
  if (!seg) return failure{seg.error().message};
  if (seg->label() != label)
    return failure{"refused the ring mailbox " + seg->name() + ": it was made by ring rank " +
                   std::to_string(seg->label()) + ", not by " + std::to_string(label)};
  if (seg->size() < data_start + piece_header || (seg->size() - data_start) % 64 != 0)
    return failure{"refused the ring mailbox " + seg->name() + ": its size " + std::to_string(seg->size()) +
                   " is not a mailbox's"};
  auto* s = new state;
  s->seg = std::move(*seg);
  return ring_inbox(s);
}

const std::string& ring_inbox::name() const { return s_->seg.name(); }

std::size_t ring_inbox::outstanding() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return static_cast<std::size_t>(
      std::count_if(s_->pieces.begin(), s_->pieces.end(), [](const state::held& p) { return !p.done; }));
}

expected<tensor> ring_inbox::take(const shared_tensor& where) {
  state& s = *s_;
  const std::string& me = s.seg.name();
  if (where.segment != me) return failure{"a piece names the segment " + where.segment + ", not the mailbox " + me};
  if (where.dtype != static_cast<std::uint8_t>(dtype::f32) || where.dims.size() != 1 || where.dims[0] < 0)
    return failure{"a piece in the mailbox " + me + " is not a flat f32 tensor"};
  const std::int64_t numel = where.dims[0];
  const std::size_t need = ring_outbox::bytes_for(numel);
  const bool inside = where.offset >= data_start && (where.offset - data_start) % 64 == 0 &&
                      where.capacity == need && need <= s.seg.size() && where.offset <= s.seg.size() - need;
  if (!inside)
    return failure{"a piece in the mailbox " + me + " at offset " + std::to_string(where.offset) + " with " +
                   std::to_string(numel) + " floats lies outside it"};
  if (where.ticket <= s.last_ticket)
    return failure{"a piece in the mailbox " + me + " has ticket " + std::to_string(where.ticket) +
                   ", which does not follow " + std::to_string(s.last_ticket)};
  std::atomic_thread_fence(std::memory_order_acquire);
  piece_head h;
  std::memcpy(&h, s.seg.data() + where.offset, sizeof h);
  if (h.ticket != where.ticket || h.numel != numel)
    return failure{"a piece in the mailbox " + me + " does not hold what its message says (ticket " +
                   std::to_string(h.ticket) + " for " + std::to_string(where.ticket) + ")"};
  std::byte* data = s.seg.data() + where.offset + piece_header;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.last_ticket = where.ticket;
    s.pieces.push_back({data, where.ticket, false});
  }
  return tensor::adopt(data, buffer_release{&state::piece_done, &s}, {numel}, dtype::f32, cpu_device);
}

}  // namespace troupe::shm
