// kv_ring_lane: a key-value member's bulk lanes to and from its ring neighbours on other
// hosts in a ring of users' loops (Note [Ring lanes] in core/ring_lanes.cpp), through the
// ring lanes and their shell every kind of ring member uses (actors/ring_lane_shell.hpp):
// asking the next worker for a lane when no ring mailbox carries the pieces, moving pieces
// onto it, offering one to the previous worker, and handing its pieces on in the order
// their messages came, each once its payload is here.
#include <utility>

#include "actors/ring_lane_shell.hpp"
#include "client/kv_member_state.hpp"

namespace troupe::kv::member_shell {

namespace {

ring_lane_shell::names names_of(const member_state& st) {
  return {worker_name(st.place.rank), worker_name(next_rank(st)), "previous worker", "troupe.kv: "};
}

void deliver(member_pointer self, ring_lanes::delivery d) {
  if (auto* f = std::get_if<fault>(&d)) return break_ring(self, std::move(*f));
  for (ring_piece& p : std::get<std::vector<ring_piece>>(d)) {
    if (self->state.ring.broken) return;
    take_ring_piece(self, std::move(p), false);
  }
  fail_if_stranded(self);  // the last payload of a neighbour that left (Note [A ring neighbour that left])
}

}  // namespace

void ask_ring_lane(member_pointer self) {
  auto& st = self->state;
  ring_lane_shell::ask(self, st.ring.lanes, st.opts.ring_lanes, st.ring.next, next_rank(st), st.place.ring_next_host,
                       request_timeout(self), names_of(st));
}

void onto_ring_lane(member_pointer self, ring_piece& p) { self->state.ring.lanes.onto_lane(p, next_rank(self->state)); }

bool ring_flushed(member_pointer self) {
  const auto& r = self->state.ring;
  return r.broken || (!r.link->waiting() && r.lanes.flushed(next_rank(self->state)));
}

caf::result<lane_offer> on_ring_lane_ask(member_pointer self) {
  auto& st = self->state;
  auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto offer = ring_lane_shell::offer(self, st.ring.lanes, st.opts.ring_lanes, sender, st.ring.prev, prev_rank(st),
                                      names_of(st));
  if (!offer) return std::move(offer.error());
  return std::move(*offer);
}

void take_ring_piece_in_order(member_pointer self, ring_piece p) {
  deliver(self, self->state.ring.lanes.take(std::move(p), worker_name(prev_rank(self->state))));
}

void on_ring_lane_payload(member_pointer self, lane_payload& p) {
  auto& r = self->state.ring;
  if (p.side != lane_side::ring_in || r.broken) return;
  deliver(self, r.lanes.payload(p.ticket, std::move(p.data), worker_name(prev_rank(self->state))));
}

void on_ring_lane_event(member_pointer self, const lane_event& e) {
  auto& st = self->state;
  if (e.side == lane_side::ring_out)
    return ring_lane_shell::out_event(st.ring.lanes, e, !st.ring.broken && !st.lost, names_of(st));
  deliver(self, st.ring.lanes.in_closed(e.why, worker_name(prev_rank(st))));
}

}  // namespace troupe::kv::member_shell
