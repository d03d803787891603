// shard_links: a member's links to the job's shard servers, one per shard, for every kind
// of member: a training member (its core asks where to pack a push and whether slices go
// whole, its actor shell asks how each call travels: actors/stage_*.cpp) and a key-value
// member of the client library (client/remote_transport.cpp). The link chooses; callers
// ask and carry out:
// - a shard in this process: the message itself, which shares the tensor (no copy, no
//   slot, and slices go whole since pieces per bucket would gain nothing);
// - a shard in another process that maps this host's shared memory: a slot of the
//   same-host fast path (transport/channel_pool.hpp, Note [Same-host fast path]), whose
//   bell block the caller may ring (Note [Doorbells]); slices go whole there too;
// - otherwise the network (over_the_network): the member's bulk lane to that shard once
//   open and the tensor large enough (Note [Bulk lanes]; the lane book is the actor's,
//   since lanes are asked for with actor requests), the message else.
// Thread-safe: a key-value member's threads lend and fill slots while its actor settles
// them. Free of CAF and of logging: what a caller may log comes back from the calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"
#include "transport/channel_pool.hpp"

namespace troupe {

class shard_links {
 public:
  // Where a shard lies from this member. `absent`: the member never calls it (a shard
  // outside its stage's key range): treated as this_process, so nothing is made for it.
  enum class reach : std::uint8_t { this_process, other_process, absent };
  struct options {
    std::string fast_path_tag;  // the job's tag for the same-host fast path; empty: off
    std::uint32_t rank = 0;     // the member's rank, which names its channels
    shm::channel_pool::limits limits;
  };

  // No shards yet: until wire(), every shard counts as in this process.
  shard_links() = default;
  shard_links(std::vector<reach> shards, options o) { wire(std::move(shards), std::move(o)); }
  shard_links(const shard_links&) = delete;
  shard_links& operator=(const shard_links&) = delete;

  // The shards, by index, once the member knows them; before any call that uses a slot.
  // Again (a new welcome): the old channels close with the pool.
  void wire(std::vector<reach> shards, options o);
  std::size_t size() const;

  // Whether a shard's slice is pulled and pushed whole rather than in one piece per
  // gradient bucket (Note [Gradient buckets]): it shares this process, or is reached (or
  // still to be tried) through shared memory, one slot per call.
  bool whole_slices(std::uint32_t s) const;
  // Whether calls to shard s go over the network, where a bulk lane may carry them.
  bool over_the_network(std::uint32_t s) const;

  // A call through a slot: the pool's channel it holds, and the descriptor for the message.
  struct slot_call {
    std::size_t channel = 0;
    shared_tensor where;
  };

  // Pushes. push_buffer: a buffer in a free push slot of shard s to pack `numel` floats
  // into, lent until route_push sends a tensor lying in it; empty: pack a fresh tensor.
  tensor push_buffer(std::uint32_t s, std::int64_t numel);
  // How a push's tensor travels: through a slot (the descriptor; `data` is emptied), or
  // nullopt: in the message or on a lane, with `data` holding the values (copied out of a
  // lent buffer whose slot could not take it, since the mapping may go before the message
  // is serialized). Data not packed into a lent buffer (an encoded gradient) is copied
  // into a free slot that fits when `copy_unlent`.
  std::optional<slot_call> route_push(std::uint32_t s, tensor& data, bool copy_unlent = true);
  // The push was answered or refused (the slot is free), or timed out: then the channel
  // closes for good, since the shard may still read it (true: it closed).
  bool push_settled(std::uint32_t s, std::size_t channel, bool timed_out);

  // Pulls. The reply slot to offer for `numel` floats, lent until reply_settled; nullopt:
  // ask for the answer in the message (or on a lane). When a channel could not be made,
  // *problem says why, and shard s is offered no more slots.
  std::optional<slot_call> route_pull(std::uint32_t s, std::int64_t numel, std::string* problem = nullptr);
  // What the shard wrote where `where` says, borrowed from the slot until reply_settled.
  expected<shm::channel_pool::reply> take_reply(std::uint32_t s, std::size_t channel, const shared_tensor& where);
  // Why an answer from shard s in shared memory this member did not offer is refused, and
  // what to do.
  static std::string not_offered(std::uint32_t s);
  shm::channel_pool::settled reply_settled(std::uint32_t s, std::size_t channel, bool inline_answer, bool timed_out);

  // The bell block of a confirmed, open channel (Note [Doorbells]); its name for the log.
  std::optional<shm::bell_block> bell(std::uint32_t s, std::size_t channel) const;
  std::string channel_name(std::uint32_t s, std::size_t channel) const;

 private:
  struct lent {
    std::uint32_t shard = 0;
    std::size_t channel = 0;
  };
  reach reach_of(std::uint32_t s) const { return s < reach_.size() ? reach_[s] : reach::this_process; }

  std::vector<reach> reach_;
  std::unique_ptr<shm::channel_pool> pool_;  // null: the fast path is off
  mutable std::mutex mu_;                    // guards lent_
  std::map<const std::byte*, lent> lent_;    // push buffers lent, by where they lie
};

}  // namespace troupe
