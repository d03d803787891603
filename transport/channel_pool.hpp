// channel_pool: a member's ends of the same-host fast path to its shards (Note [Same-host
// fast path] in transport/shared_slots.hpp), for every kind of member: a pipeline stage or
// data-parallel worker of `troupe train` (one pull and one push in flight per shard, so
// one channel each), and a key-value member of the client library (troupe.torch has many
// calls in flight at once, so a few channels per shard). Channels to a shard are created
// as pulls need them, sized for the call, and a call takes the free one with the smallest
// slot that fits, or goes in the message. Only a channel that a pull's answer confirmed
// takes pushes: then the shard is known to have it mapped. A shard that answers in the
// message instead is offered no more slots; a timeout closes its channel for good (the
// shard may still read or write it). Thread-safe: a user's thread lends and fills slots
// while the member actor's thread settles them. Free of CAF and of logging: what the
// caller may want to log comes back from the calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"
#include "transport/shared_slots.hpp"
#include "transport/shared_tensor.hpp"

namespace troupe::shm {

class channel_pool {
 public:
  struct limits {
    std::int64_t min_numel = 1;      // smaller calls go in the message: a slot saves nothing on them
    std::size_t max_channels = 1;    // per shard; each holds one push and one pull at a time
    std::size_t min_slot_bytes = 0;  // the smallest slot a new channel gets, so small calls share
  };

  // Member `rank`'s pool to `shards` shards of the job whose tag is `tag`.
  channel_pool(std::string tag, std::uint32_t rank, std::size_t shards, limits l);

  // Never offer shard s a slot (it shares this process, so the message shares the tensor).
  void skip(std::uint32_t s);

  // A push of `numel` floats to shard s: a buffer in a confirmed channel's push slot to
  // pack the gradient into (lent until push_settled), or nullopt (send it in the message).
  struct push_lease {
    std::size_t channel = 0;
    tensor buffer;
  };
  std::optional<push_lease> lend_push(std::uint32_t s, std::int64_t numel);
  // The descriptor to send for the lease of `channel`, once `filled` (its buffer, or the
  // part of it the gradient took) holds the gradient.
  shared_tensor seal_push(std::uint32_t s, std::size_t channel, const_tensor_view filled);
  // A push whose data was not packed into a lent buffer (an encoded gradient): copied into
  // a free confirmed push slot that fits, lent until push_settled; nullopt: send it in the
  // message.
  struct sealed_push {
    std::size_t channel = 0;
    shared_tensor where;
  };
  std::optional<sealed_push> copy_push(std::uint32_t s, const_tensor_view data);
  // The push was answered or refused (the slot is free), or timed out (the channel closes).
  void push_settled(std::uint32_t s, std::size_t channel, bool timed_out);

  // A pull of `numel` floats from shard s: the reply slot to offer (lent until
  // reply_settled), or nullopt (ask for the answer in the message). Creates a channel when
  // none that fits is free; when that fails, *problem (if given) says why, and shard s is
  // offered no more slots.
  struct reply_lease {
    std::size_t channel = 0;
    shared_tensor where;
  };
  std::optional<reply_lease> lend_reply(std::uint32_t s, std::int64_t numel, std::string* problem = nullptr);
  // What the shard wrote where `where` says, borrowed from the slot until reply_settled;
  // `first`: the first answer shard s gave in shared memory (worth a line in the log).
  struct reply {
    tensor values;
    bool first = false;
  };
  expected<reply> take_reply(std::uint32_t s, std::size_t channel, const shared_tensor& where);
  // The pull is over: answered in the slot and copied out, answered in the message
  // (`inline_answer`), refused, or timed out. Says what changed for the caller's log.
  enum class settled { nothing, closed_by_timeout, declined };
  settled reply_settled(std::uint32_t s, std::size_t channel, bool inline_answer, bool timed_out);

  // Channels to shard s that a shard's answer confirmed and that are still open.
  std::size_t confirmed(std::uint32_t s) const;
  // Whether shard s is offered no slots (skipped, or it could not map this host's segments).
  bool declined(std::uint32_t s) const;
  // The bell block of a confirmed, open channel to shard s (Note [Doorbells]); nullopt
  // otherwise. The memory stays mapped while the pool lives.
  std::optional<bell_block> bell(std::uint32_t s, std::size_t channel) const;
  // The name of a channel to shard s (for the log).
  std::string name(std::uint32_t s, std::size_t channel) const;

 private:
  struct entry {
    shard_channel ch;
    bool push_busy = false, reply_busy = false;
  };
  struct to_shard {
    std::vector<entry> channels;
    bool declined = false;  // skipped, or it cannot map this host's segments
    bool announced = false;
  };
  // The channel to `sh` with the smallest slot of at least `need` bytes that `usable` takes.
  template <class Usable>
  static std::optional<std::size_t> smallest_fitting(const to_shard& sh, std::size_t need, Usable usable) {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < sh.channels.size(); ++i) {
      const auto& e = sh.channels[i];
      if (e.ch.closed() || e.ch.slot_bytes() < need || !usable(e)) continue;
      if (!best || e.ch.slot_bytes() < sh.channels[*best].ch.slot_bytes()) best = i;
    }
    return best;
  }
  // A confirmed channel whose push slot is free and holds `need` bytes (the smallest such).
  static std::optional<std::size_t> free_push_channel(const to_shard& sh, std::size_t need) {
    return smallest_fitting(sh, need, [](const entry& e) { return !e.push_busy && e.ch.confirmed(); });
  }
  mutable std::mutex mu_;
  std::string tag_;
  std::uint32_t rank_ = 0;
  limits limits_;
  std::vector<to_shard> shards_;
};

}  // namespace troupe::shm
