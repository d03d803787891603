// ring_lanes: a ring member's bulk lanes to its neighbours on other hosts.
#include "core/ring_lanes.hpp"

#include <utility>

namespace troupe {

// Note [Ring lanes]
// Between hosts, ring pieces in CAF's messages pay what a shard's tensors did before bulk
// lanes (Note [Bulk lanes] in transport/lane.hpp): a middleman thread per process copies
// every byte into and out of the connection's buffers, and TLS costs a system call per
// 16 KB record. So the pieces a member sends its next member go on a lane of their own,
// as a member's pushes go to a shard; a training member's ring and a ring of users' loops
// alike:
// - A member whose next member lives on another node, and whose pieces do not go through
//   a ring mailbox (no same-host fast path, or the mailbox was declined), asks that member
//   (`ring_atom, lane_open_atom`, over the authenticated actor channel, so only its
//   previous member's own actor gets an answer) for an offer: the port of a lane listener
//   of the receiver's node (--lane-port, else any free one) and a one-time token bound to
//   the asker's rank. It dials the lane (TLS: the listener must show a worker's
//   certificate for the host dialled, and takes only a worker's) and sends the token;
//   until the lane is open, and for good if opening fails, pieces go in the messages.
// - Once the lane is open, every piece of lane::min_bytes or more goes on it, named in its
//   message by a ticket (`ring_piece::lane`); the piece's tensor is moved onto the lane, not
//   copied. A smaller piece goes in its message: the lane would cost it a second channel's
//   latency (measured on a ring of users' loops, 1,024 floats a call: 0.64 ms with every
//   piece on the lane, 0.54 in the messages).
// - The receiver keeps the pieces of its previous member in the order their messages came
//   and hands them to the collective in that order, each once its payload is here, so a
//   piece never overtakes one sent before it (the collective refuses an all-gather piece
//   that overtakes the reduce-scatter). Payloads that came before their messages wait, at
//   most max_early_payloads of them.
// - A lane that closes while a piece waits for its payload, or a message that names a
//   payload of a lane that closed or never opened, fails the member with stage_lost
//   naming the neighbour: the payload will never come, and the ring cannot finish without
//   it. A lane that closes with nothing in flight (the neighbour finished and exited) is
//   no error.

void ring_lanes::asked(std::shared_ptr<lane::member_end> end) {
  out_ = std::move(end);
  out_state_ = out_state::asked;
}

bool ring_lanes::out_closed() { return std::exchange(out_state_, out_state::closed) != out_state::closed; }

void ring_lanes::onto_lane(ring_piece& p, std::uint32_t next) {
  if (out_state_ != out_state::open || p.values.nbytes() < lane::min_bytes || !p.shared.empty()) return;
  const std::uint64_t ticket = ++tickets_;
  lane_tensor d = lane::describe(ticket, p.values);
  if (!out_->send(next, ticket, std::move(p.values))) return;  // closed meanwhile
  p.values = tensor{};
  p.lane = std::move(d);
}

ring_lanes::delivery ring_lanes::take(ring_piece p, const std::string& from) {
  if (!p.lane.empty() && !p.values.empty())
    return fault{errc::malformed, "a ring piece from " + from +
                                      " carries its values both in the message (or a mailbox) and on a bulk lane; run "
                                      "one troupe build on every node"};
  if (arrivals_.empty() && p.lane.empty()) {
    std::vector<ring_piece> ready;
    ready.push_back(std::move(p));
    return ready;
  }
  arrivals_.push_back(std::move(p));
  return deliver_ready(from);
}

ring_lanes::delivery ring_lanes::payload(std::uint64_t ticket, tensor data, const std::string& from) {
  if (payloads_.size() >= max_early_payloads)
    return fault{errc::malformed, from + " sent more than " + std::to_string(max_early_payloads) +
                                      " ring payloads that no message named; run one troupe build on every node"};
  payloads_.insert_or_assign(ticket, std::move(data));
  return deliver_ready(from);
}

ring_lanes::delivery ring_lanes::in_closed(std::string why, const std::string& from) {
  in_closed_ = true;
  in_why_ = std::move(why);
  return deliver_ready(from);
}

// The pieces at the front while each has its values; stops at the first whose payload
// has not come, or fails when it never will.
ring_lanes::delivery ring_lanes::deliver_ready(const std::string& from) {
  std::vector<ring_piece> ready;
  while (!arrivals_.empty()) {
    ring_piece& p = arrivals_.front();
    if (!p.lane.empty()) {
      auto it = payloads_.find(p.lane.ticket);
      if (it == payloads_.end()) {
        if (!in_ || in_closed_)
          return fault{errc::stage_lost, "a ring piece from " + from + " names a payload on a bulk lane that " +
                                             (in_ ? "closed (" + in_why_ + ")" : std::string("was never offered")) +
                                             "; is that node still up?"};
        break;
      }
      auto values = lane::shaped(std::move(it->second), p.lane);
      payloads_.erase(it);
      if (!values)
        return fault{errc::malformed, "a ring piece from " + from + " on the bulk lane: " + values.error().message +
                                          "; run one troupe build on every node"};
      p.values = std::move(*values);
      p.lane = {};
    }
    ready.push_back(std::move(p));
    arrivals_.pop_front();
  }
  return ready;
}

}  // namespace troupe
