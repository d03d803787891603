// shared_slots: the slots of a fast-path channel, their tickets and bounds (Note [Same-host
// fast path] in shared_slots.hpp).
#include "transport/shared_slots.hpp"

#include <atomic>
#include <cstring>
#include <span>

namespace troupe::shm {

namespace {

// Each slot: a ticket in its own cache line, then the tensor's bytes.
constexpr std::size_t slot_header = 64;

std::size_t round_up(std::size_t n) { return (n + 63) / 64 * 64; }

std::atomic_ref<std::uint64_t> ticket_of(const segment& s, std::uint64_t offset) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(s.data() + offset));
}

// The slot `where` names lies inside `s` and holds `nbytes`; otherwise why not.
std::optional<std::string> out_of_bounds(const segment& s, const shared_tensor& where, std::uint64_t nbytes) {
  const std::uint64_t size = s.size();
  if (where.offset % 64 != 0 || where.offset < header_bytes || where.offset > size ||
      size - where.offset < slot_header || size - where.offset - slot_header < where.capacity)
    return "the slot at byte " + std::to_string(where.offset) + " (" + std::to_string(where.capacity) +
           " bytes) is not inside the segment of " + std::to_string(size) + " bytes";
  if (nbytes > where.capacity)
    return "a tensor of " + std::to_string(nbytes) + " bytes does not fit a slot of " + std::to_string(where.capacity);
  return std::nullopt;
}

// The tensor layout `where` describes, checked; empty shape when it describes none.
expected<std::pair<shape, dtype>> layout_of(const shared_tensor& where) {
  const auto dt = dtype_from_byte(where.dtype);
  if (!dt) return failure{"a shared tensor of unknown dtype " + std::to_string(where.dtype)};
  if (where.dims.empty() || where.dims.size() > shape::max_rank)
    return failure{"a shared tensor of rank " + std::to_string(where.dims.size())};
  std::uint64_t numel = 1;
  for (auto d : where.dims) {
    if (d < 0 || static_cast<std::uint64_t>(d) > where.capacity)
      return failure{"a shared tensor with extent " + std::to_string(d)};
    numel *= static_cast<std::uint64_t>(d);
    if (numel > where.capacity) return failure{"a shared tensor larger than its slot"};
  }
  return std::pair{shape(std::span<const std::int64_t>(where.dims)), *dt};
}

// A writer opens a slot (its ticket zeroed: a reader refuses it from now on), fills it,
// and stamps it with the ticket the message will name.
void open_slot(const segment& s, std::uint64_t offset) {
  ticket_of(s, offset).store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}
void stamp_slot(const segment& s, std::uint64_t offset, std::uint64_t ticket) {
  ticket_of(s, offset).store(ticket, std::memory_order_release);
}

// The tensor in the slot `where` names: copied out, or borrowed (a tensor over the slot
// that frees nothing) when the protocol keeps the writer away until the borrower is done.
expected<tensor> read_slot(const segment& s, const shared_tensor& where, bool borrow) {
  auto layout = layout_of(where);
  if (!layout) return layout.error();
  const auto nbytes = static_cast<std::uint64_t>(layout->first.numel()) * size_of(layout->second);
  if (auto bad = out_of_bounds(s, where, nbytes)) return failure{*bad};
  auto stamp = ticket_of(s, where.offset);
  if (stamp.load(std::memory_order_acquire) != where.ticket)
    return failure{"the slot no longer holds ticket " + std::to_string(where.ticket) + " (stale or overwritten)"};
  std::byte* data = s.data() + where.offset + slot_header;
  if (borrow) return tensor::adopt(data, buffer_release{}, layout->first, layout->second, cpu_device);
  tensor out = tensor::uninitialized(layout->first, layout->second);
  if (nbytes > 0) std::memcpy(out.bytes(), data, nbytes);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (stamp.load(std::memory_order_relaxed) != where.ticket)
    return failure{"the slot was overwritten while it was read (ticket " + std::to_string(where.ticket) + ")"};
  return out;
}

shared_tensor describe(const std::string& segment, std::uint64_t offset, std::uint64_t capacity,
                       std::uint64_t ticket, const const_tensor_view& t) {
  shared_tensor d{segment, offset, capacity, ticket, static_cast<std::uint8_t>(t.type()), {}};
  for (int i = 0; i < t.rank(); ++i) d.dims.push_back(t.size(i));
  return d;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The worker's end

expected<shard_channel> shard_channel::create(std::string_view tag, std::size_t slot_bytes, std::uint32_t rank) {
  const std::size_t cap = round_up(slot_bytes);
  // Behind the reply slot: the channel's bell block (Note [Doorbells]).
  auto seg = segment::create(tag, header_bytes + 2 * (slot_header + cap) + bell_block::bytes(), rank);
  if (!seg) return seg.error();
  shard_channel c;
  c.seg_ = std::move(*seg);
  c.slot_bytes_ = cap;
  return c;
}

std::optional<shared_tensor> shard_channel::lend_reply_slot() {
  if (closed_ || reply_lent_) return std::nullopt;
  reply_lent_ = true;
  shared_tensor where;
  where.segment = seg_.name();
  where.offset = header_bytes + slot_header + slot_bytes_;
  where.capacity = slot_bytes_;
  where.ticket = next_ticket_++;
  return where;
}

expected<tensor> shard_channel::take_reply(const shared_tensor& where) {
  reply_lent_ = false;
  if (closed_ || where.segment != seg_.name() || where.offset != header_bytes + slot_header + slot_bytes_ ||
      where.capacity != slot_bytes_)
    return failure{"an answer names a slot this channel did not lend"};
  auto t = read_slot(seg_, where, true);
  if (!t) return t;
  if (!confirmed_) {
    confirmed_ = true;
    seg_.unlink();
  }
  return t;
}

void shard_channel::reply_failed(bool timed_out) {
  reply_lent_ = false;
  if (timed_out) closed_ = true;
}

std::optional<bell_block> shard_channel::bell() const {
  if (!seg_.mapped()) return std::nullopt;
  return bell_block(seg_.data() + header_bytes + 2 * (slot_header + slot_bytes_));
}

std::byte* shard_channel::push_data() const { return seg_.data() + header_bytes + slot_header; }

bool shard_channel::can_push(std::size_t nbytes) const {
  return confirmed_ && !closed_ && !push_lent_ && nbytes <= slot_bytes_;
}

std::optional<tensor> shard_channel::lend_push_buffer(std::int64_t numel) {
  if (numel < 0 || !can_push(static_cast<std::size_t>(numel) * size_of(dtype::f32))) return std::nullopt;
  push_lent_ = true;
  open_slot(seg_, header_bytes);
  return tensor::adopt(push_data(), buffer_release{}, {numel}, dtype::f32, cpu_device);
}

std::optional<shared_tensor> shard_channel::put_push(const_tensor_view grad) {
  if (!grad.is_contiguous()) return std::nullopt;
  const bool in_place = push_lent_ && grad.bytes() == push_data();
  if (!in_place) {
    if (!can_push(grad.nbytes())) return std::nullopt;
    push_lent_ = true;
    open_slot(seg_, header_bytes);
    if (grad.nbytes() > 0) std::memcpy(push_data(), grad.bytes(), grad.nbytes());
  }
  const std::uint64_t ticket = next_ticket_++;
  stamp_slot(seg_, header_bytes, ticket);
  return describe(seg_.name(), header_bytes, slot_bytes_, ticket, grad);
}

void shard_channel::push_settled(bool timed_out) {
  push_lent_ = false;
  if (timed_out) closed_ = true;
}

// ---------------------------------------------------------------------------------------
// The shard's end

expected<segment*> worker_channels::channel_of(std::uint32_t rank, const std::string& name) {
  auto& mine = by_rank_[rank];
  if (auto it = mine.find(name); it != mine.end()) {
    it->second.last_used = ++uses_;
    return &it->second.seg;
  }
  auto seg = segment::open(name, tag_);
  if (!seg) return seg.error();
  if (seg->label() != rank)
    return failure{"refused the shared-memory segment " + name + ": it is member " + std::to_string(seg->label()) +
                   "'s, not member " + std::to_string(rank) + "'s"};
  if (mine.size() >= max_per_member) {
    auto oldest = mine.begin();
    for (auto it = mine.begin(); it != mine.end(); ++it)
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    if (before_unmap_) before_unmap_(rank, oldest->second.seg.data(), oldest->second.seg.size());
    mine.erase(oldest);
  }
  auto& slot = mine[name];
  slot.seg = std::move(*seg);
  slot.last_used = ++uses_;
  return &slot.seg;
}

void worker_channels::forget(std::uint32_t rank) {
  if (auto it = by_rank_.find(rank); it != by_rank_.end() && before_unmap_)
    for (auto& [name, m] : it->second) before_unmap_(rank, m.seg.data(), m.seg.size());
  by_rank_.erase(rank);
  refused_.erase(rank);
}

std::byte* worker_channels::bell_of(std::uint32_t rank, const shared_tensor& reply_to) {
  auto mine = by_rank_.find(rank);
  if (mine == by_rank_.end()) return nullptr;
  auto it = mine->second.find(reply_to.segment);
  if (it == mine->second.end()) return nullptr;
  const segment& s = it->second.seg;
  const std::uint64_t at = reply_to.offset + slot_header + reply_to.capacity;
  if (reply_to.offset % 64 != 0 || reply_to.capacity % 64 != 0 || at < reply_to.offset || at > s.size() ||
      s.size() - at < bell_block::bytes())
    return nullptr;
  return s.data() + at;
}

std::size_t worker_channels::mapped() const {
  std::size_t n = 0;
  for (const auto& [rank, mine] : by_rank_) n += mine.size();
  return n;
}

expected<tensor> worker_channels::take_push(std::uint32_t rank, const shared_tensor& where, bool borrow) {
  auto seg = channel_of(rank, where.segment);
  if (!seg) return seg.error();
  return read_slot(**seg, where, borrow);
}

std::optional<shared_tensor> worker_channels::answer(std::uint32_t rank, const shared_tensor& reply_to,
                                                     const_tensor_view params, std::string& refused) {
  if (!params.is_contiguous() || params.type() != dtype::f32) return std::nullopt;
  return answer_with(
      rank, reply_to, params.sizes(),
      [&](tensor_view out) {
        if (params.nbytes() > 0) std::memcpy(out.bytes(), params.bytes(), params.nbytes());
      },
      refused);
}

std::optional<shared_tensor> worker_channels::answer_with(std::uint32_t rank, const shared_tensor& reply_to,
                                                          const shape& s, const std::function<void(tensor_view)>& fill,
                                                          std::string& refused) {
  if (reply_to.empty()) return std::nullopt;
  if (auto r = refused_.find(rank); r != refused_.end() && r->second == reply_to.segment) return std::nullopt;
  auto seg = channel_of(rank, reply_to.segment);
  if (!seg) {
    refused_[rank] = reply_to.segment;
    refused = seg.error().message;
    return std::nullopt;
  }
  const auto nbytes = static_cast<std::uint64_t>(s.numel()) * size_of(dtype::f32);
  if (out_of_bounds(**seg, reply_to, nbytes)) return std::nullopt;
  open_slot(**seg, reply_to.offset);
  tensor_view out((*seg)->data() + reply_to.offset + slot_header, dtype::f32, s);
  fill(out);
  stamp_slot(**seg, reply_to.offset, reply_to.ticket);
  return describe(reply_to.segment, reply_to.offset, reply_to.capacity, reply_to.ticket, out);
}

}  // namespace troupe::shm
