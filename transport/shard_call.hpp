// shard_call: one call of a member to one shard through its links
// (transport/shard_links.hpp), from its start to its settling: the push slot it holds,
// the reply slot it offers, the answer taken out of that slot, and what settling did to
// the channels. Every kind of member calls its shards through it: the stage shell's
// pushes and pulls (actors/stage_actions.cpp) and a key-value member's pushes, pulls and
// collectives (client/remote_transport.cpp), so the slot rules are written once.
// A value: copies share the links and name the same slots, and each slot is settled once
// (by the copy in the answer's handler). Free of CAF and of logging: what a caller may
// log comes back from the calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"
#include "transport/shard_links.hpp"

namespace troupe {

class shard_call {
 public:
  // links null: a call that never holds a slot (every tensor in the message or on a lane).
  shard_call(std::shared_ptr<shard_links> links, std::uint32_t shard) : links_(std::move(links)), shard_(shard) {}

  std::uint32_t shard() const { return shard_; }

  // Pushes (and a collective's piece). A buffer in a free push slot to pack `numel`
  // floats into, lent until route_push; empty: pack a fresh tensor.
  tensor push_buffer(std::int64_t numel);
  // Where the push's tensor lies when a slot takes it (`data` is emptied, and the slot is
  // held until settle_push); empty: it travels in the message or on a lane, `data` holding
  // it. Data not packed into a lent buffer is copied into a free slot when `copy_unlent`.
  shared_tensor route_push(tensor& data, bool copy_unlent = true);
  // The push was answered or refused (its slot is free again), or timed out: then its
  // channel closes for good, since the shard may still read the slot (true: it closed).
  bool settle_push(bool timed_out);

  // Pulls (and a collective's answer). The reply slot to offer for `numel` floats, held
  // until settle_reply; empty: the answer comes in the message or on a lane. When no
  // channel could be made, *problem says why (shard_links::route_pull).
  shared_tensor offer_reply(std::int64_t numel, std::string* problem = nullptr);
  // The answer the shard wrote where `where` says, borrowed from the slot until
  // settle_reply (`first`: the first answer of this shard in shared memory); an error that
  // names the shard when this call offered no slot, or the slot does not hold it.
  expected<shm::channel_pool::reply> take_reply(const shared_tensor& where);
  // The answer was copied out of the slot, came in the message (`inline_answer`), was
  // refused, or timed out. Says what changed, for the caller's log (why_closed).
  shm::channel_pool::settled settle_reply(bool inline_answer, bool timed_out);

  bool holds_push_slot() const { return push_channel_.has_value(); }
  bool offers_reply_slot() const { return reply_channel_.has_value(); }
  std::optional<std::size_t> push_channel() const { return push_channel_; }
  std::optional<std::size_t> reply_channel() const { return reply_channel_; }
  // The name of the channel the reply slot is on (for the log); empty when none.
  std::string reply_channel_name() const;

  // Why settling closed a channel (null for `settled::nothing`), and the log line that
  // says so after the member's name.
  static const char* why_closed(shm::channel_pool::settled s);
  static const char* why_push_closed() { return "a push timed out, so the shard may still read its slot"; }
  static std::string closing_note(std::uint32_t shard, const char* why) {
    return "closes its shared-memory channel to shard " + std::to_string(shard) + " (" + why +
           "); its tensors go over the network";
  }

 private:
  std::shared_ptr<shard_links> links_;
  std::uint32_t shard_ = 0;
  std::optional<std::size_t> push_channel_, reply_channel_;
};

}  // namespace troupe
