// shared_slots: the slots of a fast-path channel, their tickets and bounds (Note [Same-host
// fast path] in shared_slots.hpp).
#include "core/shared_slots.hpp"

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

void write_slot(const segment& s, std::uint64_t offset, std::uint64_t ticket, const_tensor_view t) {
  auto stamp = ticket_of(s, offset);
  stamp.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  if (t.nbytes() > 0) std::memcpy(s.data() + offset + slot_header, t.bytes(), t.nbytes());
  stamp.store(ticket, std::memory_order_release);
}

expected<tensor> read_slot(const segment& s, const shared_tensor& where) {
  auto layout = layout_of(where);
  if (!layout) return layout.error();
  tensor out = tensor::uninitialized(layout->first, layout->second);
  if (auto bad = out_of_bounds(s, where, out.nbytes())) return failure{*bad};
  auto stamp = ticket_of(s, where.offset);
  if (stamp.load(std::memory_order_acquire) != where.ticket)
    return failure{"the slot no longer holds ticket " + std::to_string(where.ticket) + " (stale or overwritten)"};
  if (out.nbytes() > 0) std::memcpy(out.bytes(), s.data() + where.offset + slot_header, out.nbytes());
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

expected<shard_channel> shard_channel::create(std::string_view tag, std::size_t slot_bytes) {
  const std::size_t cap = round_up(slot_bytes);
  auto seg = segment::create(tag, header_bytes + 2 * (slot_header + cap));
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
  auto t = read_slot(seg_, where);
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

std::optional<shared_tensor> shard_channel::put_push(const_tensor_view grad) {
  if (!confirmed_ || closed_ || push_lent_ || grad.nbytes() > slot_bytes_ || !grad.is_contiguous())
    return std::nullopt;
  push_lent_ = true;
  const std::uint64_t ticket = next_ticket_++;
  write_slot(seg_, header_bytes, ticket, grad);
  return describe(seg_.name(), header_bytes, slot_bytes_, ticket, grad);
}

void shard_channel::push_settled(bool timed_out) {
  push_lent_ = false;
  if (timed_out) closed_ = true;
}

// ---------------------------------------------------------------------------------------
// The shard's end

expected<segment*> worker_channels::channel_of(std::uint32_t rank, const std::string& name) {
  auto it = by_rank_.find(rank);
  if (it != by_rank_.end() && it->second.name() == name) return &it->second;
  auto seg = segment::open(name, tag_);
  if (!seg) return seg.error();
  auto& slot = by_rank_[rank];
  slot = std::move(*seg);
  return &slot;
}

expected<tensor> worker_channels::take_push(std::uint32_t rank, const shared_tensor& where) {
  auto seg = channel_of(rank, where.segment);
  if (!seg) return seg.error();
  return read_slot(**seg, where);
}

std::optional<shared_tensor> worker_channels::answer(std::uint32_t rank, const shared_tensor& reply_to,
                                                     const_tensor_view params, std::string& refused) {
  if (reply_to.empty() || !params.is_contiguous()) return std::nullopt;
  if (auto r = refused_.find(rank); r != refused_.end() && r->second == reply_to.segment) return std::nullopt;
  auto seg = channel_of(rank, reply_to.segment);
  if (!seg) {
    refused_[rank] = reply_to.segment;
    refused = seg.error().message;
    return std::nullopt;
  }
  if (out_of_bounds(**seg, reply_to, params.nbytes())) return std::nullopt;
  write_slot(**seg, reply_to.offset, reply_to.ticket, params);
  return describe(reply_to.segment, reply_to.offset, reply_to.capacity, reply_to.ticket, params);
}

}  // namespace troupe::shm
