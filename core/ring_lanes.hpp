// ring_lanes: a ring member's bulk lanes to its neighbours on other hosts (Note [Ring
// lanes] in core/ring_lanes.cpp), for every kind of ring member: a --mode allreduce
// training member (its shell, actors/stage_ring_lane.cpp) and a key-value member in a ring
// of users' loops (client/kv_ring_lane.cpp). It holds the lane to the next member (asked
// for, open or closed) and moves pieces onto it, and the lane end that takes the previous
// member's pieces, which it hands on in the order their messages came, each once its
// payload is here. The shells ask, offer and carry the lanes' events.
// CAF-free; one thread (the member's) uses it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "base/errc.hpp"
#include "base/expected.hpp"
#include "core/ring_collective.hpp"
#include "tensor/tensor.hpp"
#include "transport/lane.hpp"

namespace troupe {

// A node's ends of the bulk lanes between ring neighbours, made when a member first needs
// them: the listener that takes the previous member's pieces, and the dialler that sends
// the next member's. Unset: ring pieces go in the messages.
struct ring_lane_ends {
  std::function<expected<std::shared_ptr<lane::shard_end>>()> listener;
  std::function<std::shared_ptr<lane::member_end>()> dialler;
};

class ring_lanes {
 public:
  // Payloads kept for messages that have not named them yet; a neighbour that sends more
  // is broken (its messages stopped) or hostile.
  static constexpr std::size_t max_early_payloads = 4096;

  // --- The lane to the next member.
  enum class out_state { unasked, asked, open, closed };
  out_state out() const { return out_state_; }
  // The lane is asked for through `end` (the caller's dialler, started by the caller).
  void asked(std::shared_ptr<lane::member_end> end);
  lane::member_end& out_end() { return *out_; }
  // The lane opened, or closed (also: it could not be opened, or was refused). False when
  // the lane was closed already.
  void out_opened() { out_state_ = out_state::open; }
  bool out_closed();
  // Moves p's values onto the open lane to member `next` (a piece of lane::min_bytes or
  // more whose values do not lie in a mailbox): p then names them by their ticket. Else p
  // is left as it was, to go in its message.
  void onto_lane(ring_piece& p, std::uint32_t next);
  // Whether every piece put on the lane to `next` has left this process.
  bool flushed(std::uint32_t next) const { return !out_ || out_->unsent(next) == 0; }

  // --- The lane from the previous member. The shell makes its end when it first offers it.
  bool has_in() const { return in_ != nullptr; }
  void listen(std::shared_ptr<lane::shard_end> end) { in_ = std::move(end); }
  lane::shard_end& in_end() { return *in_; }
  // An offer was made: pieces on the lane may come again.
  void in_offered() { in_closed_ = false; }

  // What the previous member's pieces give: the pieces ready for the collective, in the
  // order their messages came, or why the member cannot go on (a payload that will never
  // come, or one that does not fit). `from` names the previous member in the fault.
  using delivery = std::variant<std::vector<ring_piece>, fault>;
  // A piece's message (values in it, or in a mailbox and filled, or named on the lane).
  delivery take(ring_piece p, const std::string& from);
  // The payload under `ticket` came on the lane.
  delivery payload(std::uint64_t ticket, tensor data, const std::string& from);
  // The lane from the previous member closed: a piece that waits for its payload fails.
  delivery in_closed(std::string why, const std::string& from);
  // Whether a piece's message came and its payload has not yet.
  bool awaiting_payloads() const { return !arrivals_.empty(); }

 private:
  delivery deliver_ready(const std::string& from);

  std::shared_ptr<lane::member_end> out_;
  out_state out_state_ = out_state::unasked;
  std::uint64_t tickets_ = 0;
  std::shared_ptr<lane::shard_end> in_;
  bool in_closed_ = false;
  std::string in_why_;
  std::deque<ring_piece> arrivals_;           // in the order their messages came
  std::map<std::uint64_t, tensor> payloads_;  // not named by a message yet
};

}  // namespace troupe
