// kv_fast_path: a key-value member's ends of the same-host fast path to its job's shards
// (Note [Same-host fast path] in core/shared_slots.hpp). A user's loop has several calls
// in flight to one shard (troupe.torch pushes and pulls every parameter from its own
// gradient hook), so each shard gets a small pool of channels, created as calls need
// them and sized for the largest call seen; a call takes a free channel that fits or
// goes in the message. Thread-safe: the user's thread lends slots and fills them, the
// member actor's thread settles them when the answers come.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "core/messages.hpp"
#include "core/shared_slots.hpp"
#include "tensor/tensor.hpp"

namespace troupe::kv {

class kv_fast_path {
 public:
  // Calls smaller than this many floats go in the message: a slot saves nothing on them.
  static constexpr std::int64_t min_numel = 4096;
  // Channels per shard, at most; each holds one push and one pull at a time.
  static constexpr std::size_t max_channels = 8;
  // The smallest slot a new channel gets, so that small keys share channels.
  static constexpr std::size_t min_slot_bytes = std::size_t{1} << 20;

  // Member `rank`'s fast path to `shards` shards of the job whose tag is `tag`.
  kv_fast_path(std::string tag, std::uint32_t rank, std::size_t shards);

  // A push of `numel` floats to shard s: a buffer in a push slot to pack the gradient into
  // (lent until push_settled), or nullopt (send it in the message). Only a channel that a
  // pull's answer confirmed takes pushes: then the shard is known to have it mapped.
  struct push_lease {
    std::size_t channel = 0;
    tensor buffer;
  };
  std::optional<push_lease> lend_push(std::uint32_t s, std::int64_t numel);
  // The descriptor to send for a filled lease (a lent buffer always has one).
  shared_tensor seal_push(std::uint32_t s, const push_lease& lease);
  // The push was answered or refused (the slot is free), or timed out (the channel closes:
  // the shard may still read it).
  void push_settled(std::uint32_t s, std::size_t channel, bool timed_out);

  // A pull of `numel` floats from shard s: the reply slot to offer (lent until
  // reply_settled), or nullopt (ask for the answer in the message). Creates a channel
  // when none that fits is free.
  struct reply_lease {
    std::size_t channel = 0;
    shared_tensor where;
  };
  std::optional<reply_lease> lend_reply(std::uint32_t s, std::int64_t numel);
  // What the shard wrote where `where` says, borrowed from the slot until reply_settled.
  expected<tensor> take_reply(std::uint32_t s, std::size_t channel, const shared_tensor& where);
  // The pull is over: answered in the slot and copied out, answered in the message
  // (`inline_answer`: a shard that never answered in a slot cannot map this host's
  // segments, so no more are offered to it), refused, or timed out (the channel closes).
  void reply_settled(std::uint32_t s, std::size_t channel, bool inline_answer, bool timed_out);

  // Channels to shard s that a shard's answer confirmed (for tests and the benchmarks).
  std::size_t confirmed(std::uint32_t s) const;

 private:
  struct entry {
    shm::shard_channel ch;
    bool push_busy = false, reply_busy = false;
  };
  struct to_shard {
    std::vector<entry> channels;
    bool declined = false;
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
  mutable std::mutex mu_;
  std::string tag_;
  std::uint32_t rank_ = 0;
  std::vector<to_shard> shards_;
};

}  // namespace troupe::kv
