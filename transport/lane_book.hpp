// lane_book: what a member keeps of its bulk lanes to its shards (Note [Bulk lanes] in
// transport/lane.hpp), for every kind of member (a training stage, a key-value client): each
// shard's lane through asking, opening, open and off; the tickets it names payloads by;
// and the replies that came before their payloads. Lanes are asked for once per shard,
// when a call is large enough to need one; a lane that could not open or closed stays off,
// and its tensors go in the messages. Not thread-safe: the member's actor owns it.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/lane.hpp"

namespace troupe::lane {

template <class Reply>
class member_book {
 public:
  enum class state : std::uint8_t { none, asking, opening, open, off };

  explicit member_book(std::size_t shards) : to_(shards, state::none) {}

  // Whether to ask shard s for an offer now: none was asked for, and a call of `bytes`
  // needs a lane. Marks s as asking.
  bool should_ask(std::uint32_t s, std::size_t bytes) {
    if (s >= to_.size() || to_[s] != state::none || bytes < min_bytes) return false;
    to_[s] = state::asking;
    return true;
  }
  // Shard s made an offer (the member dials it), or refused (its tensors go in messages).
  void offered(std::uint32_t s) { set(s, state::opening); }
  void refused(std::uint32_t s) { set(s, state::off); }
  // The lane to s opened.
  void opened(std::uint32_t s) {
    if (s < to_.size() && to_[s] == state::opening) to_[s] = state::open;
  }
  // The lane to s closed (or did not open): it stays off, and the replies that waited for
  // its payloads are returned, to fail.
  std::vector<Reply> closed(std::uint32_t s) {
    set(s, state::off);
    return replies.close(s);
  }

  // Whether a call of `bytes` to s goes on the lane.
  bool carries(std::uint32_t s, std::size_t bytes) const {
    return s < to_.size() && to_[s] == state::open && bytes >= min_bytes;
  }
  state of(std::uint32_t s) const { return s < to_.size() ? to_[s] : state::off; }
  std::size_t size() const { return to_.size(); }  // shards
  std::uint64_t next_ticket() { return next_++; }

  rendezvous<Reply> replies;  // keyed (shard, ticket)

 private:
  void set(std::uint32_t s, state x) {
    if (s < to_.size()) to_[s] = x;
  }
  std::vector<state> to_;
  std::uint64_t next_ = 1;
};

}  // namespace troupe::lane
