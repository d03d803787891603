// stage_ring_lane: a member's bulk lanes to and from its ring neighbours on other hosts in
// --mode allreduce (Note [Ring lanes]): asking for the lane to the next replica, moving
// pieces onto it, offering one to the previous replica, and taking its pieces, in order,
// once their payloads are here.
#include <spdlog/spdlog.h>

#include <utility>

#include "actors/stage_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::stage_shell {

// Note [Ring lanes]
// Between hosts, ring pieces in CAF's messages pay what a shard's tensors did before bulk
// lanes (Note [Bulk lanes] in transport/lane.hpp): a middleman thread per process copies every
// byte into and out of the connection's buffers, and TLS costs a system call per 16 KB
// record. So the pieces a member sends its next replica go on a lane of their own, as a
// member's pushes go to a shard:
// - A member whose next replica lives on another node, and whose pieces do not go through
//   a ring mailbox (no same-host fast path, or the mailbox was declined), asks that
//   replica (`ring_atom, lane_open_atom`, over the authenticated actor channel, so only
//   its previous replica's own actor gets an answer) for an offer: the port of a lane
//   listener of the receiver's node (--lane-port, else any free one) and a one-time token
//   bound to the asker's replica. It dials the lane (TLS: the listener must show a
//   worker's certificate for the host dialled, and takes only a worker's) and sends the
//   token; until the lane is open, and for good if opening fails, pieces go in the
//   messages.
// - Once the lane is open, every piece with values goes on it, named in its message by a
//   ticket (`ring_piece::lane`); the piece's tensor is moved onto the lane, not copied.
// - The receiver keeps the pieces of its previous replica in the order their messages
//   came and hands them to the core in that order, each once its payload is here, so a
//   piece never overtakes one sent before it (the core refuses an all-gather piece that
//   overtakes the reduce-scatter). Payloads that came before their messages wait, at
//   most max_early_payloads of them.
// - A lane that closes while a piece waits for its payload, or a message that names a
//   payload of a lane that closed or never opened, fails the member with stage_lost
//   naming the neighbour: the payload will never come, and the ring cannot finish without
//   it. A lane that closes with nothing in flight (the neighbour finished and exited) is
//   no error.
namespace {

// Payloads a member keeps for messages that have not named them yet; a neighbour that
// sends more is broken (its messages stopped) or hostile.
constexpr std::size_t max_early_payloads = 4096;

std::string replica_name(std::uint32_t r) { return "replica " + std::to_string(r); }

// Hands the pieces at the front to the core while each has its values; stops at the first
// whose payload has not come, or fails the member when it never will.
void deliver_ready(stage_pointer self) {
  auto& st = self->state;
  auto& rl = st.ring_lanes;
  const std::string prev = replica_name(st.core->previous_replica());
  while (!rl.arrivals.empty() && st.core->phase() != member_phase::stopped) {
    ring_piece& p = rl.arrivals.front();
    if (!p.lane.empty()) {
      auto it = rl.payloads.find(p.lane.ticket);
      if (it == rl.payloads.end()) {
        if (!rl.in || rl.in_closed)
          return fail(self, {errc::stage_lost, who(self) + ": a ring piece from " + prev +
                                                   " names a payload on a bulk lane that " +
                                                   (rl.in ? "closed (" + rl.in_why + ")" : std::string("was never offered")) +
                                                   "; is that node still up?"});
        return;
      }
      auto values = lane::shaped(std::move(it->second), p.lane);
      rl.payloads.erase(it);
      if (!values)
        return fail(self, {errc::malformed, who(self) + ": a ring piece from " + prev + " on the bulk lane: " +
                                                values.error().message + "; run one troupe build on every node"});
      p.values = std::move(*values);
      p.lane = {};
    }
    ring_piece ready = std::move(p);
    rl.arrivals.pop_front();
    drive(self, [&](member_core& c) { return c.on_ring_piece(std::move(ready), true, prev); });
  }
}

}  // namespace

void ask_ring_lane(stage_pointer self) {
  auto& st = self->state;
  auto& rl = st.ring_lanes;
  if (rl.out_state != stage_ring_lanes::state::unasked || !st.opts.ring_lane_dialler || !st.ring_next ||
      st.ring_next.node() == self->node())
    return;
  const auto& place = st.core->place();
  rl.out_state = stage_ring_lanes::state::asked;
  rl.out = st.opts.ring_lane_dialler();
  rl.out->start(ring_out_handlers(caf::actor_cast<caf::actor_addr>(self)));
  const std::uint32_t next = st.core->next_replica();
  const std::string host = place.ring_next_host;
  self->request(st.ring_next, std::chrono::milliseconds(place.job.request_timeout_ms), ring_atom::value,
                lane_open_atom::value)
      .then([self, next, host](const lane_offer& offer) { self->state.ring_lanes.out->open(next, host, offer); },
            [self, next](caf::error& e) {
              self->state.ring_lanes.out_state = stage_ring_lanes::state::closed;
              spdlog::info("{}: no bulk lane to {} ({}); its ring pieces go in the messages", who(self),
                           replica_name(next), describe(e));
            });
}

bool ring_lane_flushed(stage_pointer self) {
  const auto& rl = self->state.ring_lanes;
  return !rl.out || rl.out->unsent(self->state.core->next_replica()) == 0;
}

void onto_ring_lane(stage_pointer self, ring_piece& p) {
  auto& rl = self->state.ring_lanes;
  if (rl.out_state != stage_ring_lanes::state::open || p.values.empty() || !p.shared.empty()) return;
  const std::uint64_t ticket = ++rl.tickets;
  lane_tensor d = lane::describe(ticket, p.values);
  if (!rl.out->send(self->state.core->next_replica(), ticket, std::move(p.values))) return;  // closed meanwhile
  p.values = tensor{};
  p.lane = std::move(d);
}

namespace {

// An offer of this member's ring lane listener to `sender`, which must be its previous
// replica, or why not.
caf::expected<lane_offer> offer_ring_lane(stage_pointer self, const caf::actor_addr& sender) {
  auto& st = self->state;
  auto& rl = st.ring_lanes;
  if (!st.ring_prev || sender != st.ring_prev.address()) {
    const std::string peer = caf::to_string(sender);
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, peer))
      spdlog::warn("{}: refused a ring lane to {}, which is not its previous replica in the ring", who(self), peer);
    return make_error(errc::not_member, "only the previous replica in the ring may open a ring lane to " + who(self));
  }
  if (!st.opts.ring_lane_listener) return make_error(errc::bad_job, who(self) + " has no bulk lanes (--no-bulk-lanes)");
  if (!rl.in) {
    auto made = st.opts.ring_lane_listener();
    if (!made || !*made)
      return make_error(errc::bad_job, who(self) + " cannot take a ring lane: " +
                                           (made ? std::string("no lane listener") : made.error().message));
    rl.in = std::move(*made);
    rl.in->start(ring_in_handlers(caf::actor_cast<caf::actor_addr>(self)));
  }
  auto offer = rl.in->offer(st.core->previous_replica());
  if (!offer) return make_error(errc::bad_job, who(self) + " cannot offer a ring lane: " + offer.error().message);
  rl.in_closed = false;
  return *offer;
}

}  // namespace

caf::result<lane_offer> on_ring_lane_ask(stage_pointer self, const caf::actor_addr& sender) {
  auto& rl = self->state.ring_lanes;
  const member_phase ph = self->state.core->phase();
  if (ph == member_phase::joining || ph == member_phase::wiring || ph == member_phase::grouping) {
    // the ring's hellos may not all be in yet: answered once the member trains
    if (rl.early_ask) return make_error(errc::malformed, "a ring lane was asked for twice before the job started");
    rl.early_ask = self->make_response_promise<lane_offer>();
    rl.early_asker = sender;
    return *rl.early_ask;
  }
  auto offer = offer_ring_lane(self, sender);
  if (!offer) return std::move(offer.error());
  return std::move(*offer);
}

void answer_early_ring_lane_ask(stage_pointer self) {
  auto& rl = self->state.ring_lanes;
  if (!rl.early_ask) return;
  auto promise = std::move(*rl.early_ask);
  rl.early_ask.reset();
  auto offer = offer_ring_lane(self, std::exchange(rl.early_asker, {}));
  if (offer)
    promise.deliver(std::move(*offer));
  else
    promise.deliver(std::move(offer.error()));
}

void take_ring_piece_in_order(stage_pointer self, ring_piece p) {
  auto& rl = self->state.ring_lanes;
  if (!p.lane.empty() && !p.values.empty())
    return fail(self, {errc::malformed, who(self) + ": a ring piece from " +
                                            replica_name(self->state.core->previous_replica()) +
                                            " carries its values both in the message (or a mailbox) and on a bulk "
                                            "lane; run one troupe build on every node"});
  if (rl.arrivals.empty() && p.lane.empty()) {
    const std::string prev = replica_name(self->state.core->previous_replica());
    drive(self, [&](member_core& c) { return c.on_ring_piece(std::move(p), true, prev); });
    return;
  }
  rl.arrivals.push_back(std::move(p));
  deliver_ready(self);
}

void on_ring_lane_payload(stage_pointer self, lane_payload& p) {
  auto& st = self->state;
  auto& rl = st.ring_lanes;
  if (p.side != lane_side::ring_in || st.core->phase() == member_phase::stopped) return;
  if (rl.payloads.size() >= max_early_payloads)
    return fail(self, {errc::malformed, who(self) + ": " + replica_name(st.core->previous_replica()) + " sent more than " +
                                            std::to_string(max_early_payloads) +
                                            " ring payloads that no message named; run one troupe build on every node"});
  rl.payloads.insert_or_assign(p.ticket, std::move(p.data));
  deliver_ready(self);
}

void on_ring_lane_event(stage_pointer self, const lane_event& e) {
  auto& st = self->state;
  auto& rl = st.ring_lanes;
  if (e.side == lane_side::ring_out) {
    const std::string next = replica_name(e.peer);
    if (e.opened) {
      rl.out_state = stage_ring_lanes::state::open;
      spdlog::info("{}: sends its ring pieces to {} over a bulk lane", who(self), next);
      return;
    }
    if (rl.out_state != stage_ring_lanes::state::closed && st.core->phase() == member_phase::training)
      spdlog::info("{}: the bulk lane to {} closed ({}); its ring pieces go in the messages", who(self), next, e.why);
    rl.out_state = stage_ring_lanes::state::closed;
    return;
  }
  rl.in_closed = true;
  rl.in_why = e.why;
  deliver_ready(self);  // a piece that waits for a payload of this lane fails the member
}

}  // namespace troupe::stage_shell
