// shared_slots: the two ends of the same-host fast path between a worker and a shard: the
// worker's channel (its segment, a push slot and a reply slot) and the shard's view of its
// workers' channels.
//
// Note [Same-host fast path]
// A worker and a shard on one host exchange gradients and parameters through shared
// memory; the actor message carries only a shared_tensor (segment, slot, ticket, shape),
// so the payload is written once and read once instead of being serialized, encrypted,
// copied through the kernel twice, decrypted and deserialized.
// - The worker creates one segment per remote shard (shm_segment: mode 0600, named after
//   the job's tag) with two slots: the push slot, which it writes and the shard reads, and
//   the reply slot, which the shard writes and it reads. Each slot starts with a ticket.
// - A pull offers the reply slot (reply_to). A shard that can map the segment (same host,
//   same user, the job's tag) answers into it; otherwise it answers in the message, and
//   the worker never uses the channel. Pushes use the push slot only once a reply came
//   through the channel: then the worker knows the shard has it mapped, and removes its
//   name, so a crash leaves nothing behind (a crash before that is swept by the next node
//   of the job to start: shm::sweep).
// - A slot is the writer's again only when the request that lent it is answered (an ack
//   or a refusal for a push, a reply for a pull). A request that timed out may still be
//   read or written late, so the worker closes that channel and goes on over the network.
// - Tickets are a seqlock: the writer zeroes the ticket, writes, then stamps the ticket
//   the message names; the reader checks it before and after copying, so a torn or stale
//   slot is refused, never taken.
// - Trust: the fast path trusts exactly what the host's permissions enforce. Only
//   processes of the job's user can open a segment (0600, owner checked on open); TLS
//   protects nothing between them that those permissions do not. A process of the same
//   user could also read the job's memory directly, so it gains nothing here. A
//   segment's header names the member that made it, and a shard takes it only from that
//   member (whose identity the shell checked first), so one member cannot point a shard
//   at another member's slots.
// - Copies: the worker packs its gradient straight into the push slot (lend_push_buffer)
//   and unpacks parameters straight from the reply slot (take_reply borrows it); the shard
//   packs its answer straight into the reply slot (answer_with) and, when its core does
//   not keep gradients (async, ssp), applies one straight from the push slot. What is
//   borrowed stays valid until the request that lends the slot again, which the borrower's
//   own next step sends; so each tensor crosses memory once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"
#include "transport/doorbell.hpp"
#include "transport/shared_tensor.hpp"
#include "transport/shm_segment.hpp"

namespace troupe::shm {

// The worker's end of the fast path to one shard.
class shard_channel {
 public:
  // A channel of member `rank` whose slots each hold `slot_bytes` bytes of tensor data.
  static expected<shard_channel> create(std::string_view tag, std::size_t slot_bytes, std::uint32_t rank);

  // For a pull: the reply slot to offer, or nullopt (ask for the answer in the message)
  // when the channel is closed or the slot is lent to a pull not yet answered.
  std::optional<shared_tensor> lend_reply_slot();
  // The parameters a shard wrote where `where` says, borrowed from the reply slot (valid
  // until the slot is lent again; copy them to keep them). The first confirms the channel:
  // the shard has it mapped, so pushes may use it and its name is removed. The slot is
  // free again either way.
  expected<tensor> take_reply(const shared_tensor& where);
  // The pull failed (refused: the slot is free; timed out: the channel closes).
  void reply_failed(bool timed_out);

  // For a push: a (numel) f32 tensor that lies in the push slot, to pack the gradient
  // into; nullopt when put_push could not take it now. The slot is lent from here on.
  std::optional<tensor> lend_push_buffer(std::int64_t numel);
  // For a push: says where `grad` lies, writing it into the push slot unless it is the
  // buffer lend_push_buffer gave; nullopt (send it in the message) when the channel is not
  // confirmed, is closed, the slot is lent to a push not yet answered, or `grad` does not
  // fit.
  std::optional<shared_tensor> put_push(const_tensor_view grad);
  // Whether `data` lies in this channel's push slot (a buffer lend_push_buffer gave).
  bool holds(const std::byte* data) const { return seg_.mapped() && data == push_data(); }
  // The push was answered (acknowledged or refused: the slot is free) or timed out (the
  // channel closes).
  void push_settled(bool timed_out);

  // The channel's bell block, behind the reply slot (Note [Doorbells]); nullopt when the
  // channel has no segment.
  std::optional<bell_block> bell() const;

  bool confirmed() const { return confirmed_; }
  bool closed() const { return closed_; }
  const std::string& name() const { return seg_.name(); }
  // The bytes of tensor data each slot holds.
  std::size_t slot_bytes() const { return slot_bytes_; }

 private:
  std::byte* push_data() const;
  bool can_push(std::size_t nbytes) const;
  segment seg_;
  std::size_t slot_bytes_ = 0;
  std::uint64_t next_ticket_ = 1;
  bool confirmed_ = false, closed_ = false, push_lent_ = false, reply_lent_ = false;
};

// A shard's view of its workers' channels, by rank: each mapped on first use and kept
// until the worker leaves; a worker may have several (a key-value member keeps a few per
// shard, so calls in flight each find a slot), and beyond max_per_member the one used
// least recently is unmapped. A segment is taken only for the rank its header names, so a
// member cannot make the shard read or write another's slots.
class worker_channels {
 public:
  explicit worker_channels(std::string tag) : tag_(std::move(tag)) {}
  // The gradient worker `rank` left where `where` says: copied out, or with `borrow`
  // borrowed from the slot (valid until the push is answered); refused (with the reason)
  // when the segment cannot be opened or the slot is out of bounds, torn or stale.
  expected<tensor> take_push(std::uint32_t rank, const shared_tensor& where, bool borrow = false);
  // Fills the slot worker `rank` offered with a tensor of shape `s` (f32) through `fill`,
  // and says what to send back in the reply; nullopt as for answer().
  std::optional<shared_tensor> answer_with(std::uint32_t rank, const shared_tensor& reply_to, const shape& s,
                                           const std::function<void(tensor_view)>& fill, std::string& refused);
  // Writes `params` into the slot worker `rank` offered; what to send back in the reply,
  // or nullopt (answer in the message) when the segment cannot be opened (another host,
  // another user or job) or the slot is too small. A segment refused once is not tried
  // again; `refused` gets the reason that first time only.
  std::optional<shared_tensor> answer(std::uint32_t rank, const shared_tensor& reply_to, const_tensor_view params,
                                      std::string& refused);
  // Unmaps every segment of `rank`.
  void forget(std::uint32_t rank);
  // The bell block of the segment `reply_to` names, which this shard has mapped for
  // `rank`, behind the slot it names (Note [Doorbells]); nullptr when it is not mapped or
  // the block would not lie inside it. Valid until before_unmap is called for it.
  std::byte* bell_of(std::uint32_t rank, const shared_tensor& reply_to);
  // Called with a segment's rank, mapping and size before the segment is unmapped (forget, or
  // the least used beyond max_per_member).
  void before_unmap(std::function<void(std::uint32_t, const std::byte*, std::size_t)> f) { before_unmap_ = std::move(f); }
  // How many segments are mapped, of every member.
  std::size_t mapped() const;

  static constexpr std::size_t max_per_member = 16;

 private:
  struct mapped_segment {
    segment seg;
    std::uint64_t last_used = 0;
  };
  expected<segment*> channel_of(std::uint32_t rank, const std::string& name);
  std::string tag_;
  std::uint64_t uses_ = 0;
  std::map<std::uint32_t, std::map<std::string, mapped_segment>> by_rank_;
  std::map<std::uint32_t, std::string> refused_;  // the segment each rank offered last that could not be opened
  std::function<void(std::uint32_t, const std::byte*, std::size_t)> before_unmap_;
};

// The slot bytes a channel needs for a tensor of `numel` f32 elements.
inline std::size_t slot_bytes_for(std::int64_t numel) { return static_cast<std::size_t>(numel) * 4; }

}  // namespace troupe::shm
