// stage_ring_lane: a member's bulk lanes to and from its ring neighbours on other hosts in
// --mode allreduce (Note [Ring lanes] in core/ring_lanes.cpp), through the ring lanes and
// their shell every kind of ring member uses (actors/ring_lane_shell.hpp): asking for the
// lane to the next replica, moving pieces onto it, offering one to the previous replica,
// and handing its pieces to the core, in order, once their payloads are here.
#include <utility>

#include "actors/ring_lane_shell.hpp"
#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

std::string replica_name(std::uint32_t r) { return "replica " + std::to_string(r); }

ring_lane_shell::names names_of(stage_pointer self) {
  return {who(self), replica_name(self->state.core->next_replica()), "previous replica", ""};
}

// Hands what the lanes made ready to the core, in order, or fails the member.
void deliver(stage_pointer self, ring_lanes::delivery d) {
  const std::string prev = replica_name(self->state.core->previous_replica());
  if (auto* f = std::get_if<fault>(&d)) return fail(self, {f->code, who(self) + ": " + f->detail});
  for (ring_piece& p : std::get<std::vector<ring_piece>>(d)) {
    if (self->state.core->phase() == member_phase::stopped) return;
    drive(self, [&](member_core& c) { return c.on_ring_piece(std::move(p), true, prev); });
  }
}

}  // namespace

void ask_ring_lane(stage_pointer self) {
  auto& st = self->state;
  const auto& place = st.core->place();
  ring_lane_shell::ask(self, st.ring_lanes.link, st.opts.ring_lanes, st.ring_next, st.core->next_replica(),
                       place.ring_next_host, std::chrono::milliseconds(place.job.request_timeout_ms), names_of(self));
}

bool ring_lane_flushed(stage_pointer self) {
  return self->state.ring_lanes.link.flushed(self->state.core->next_replica());
}

void onto_ring_lane(stage_pointer self, ring_piece& p) {
  self->state.ring_lanes.link.onto_lane(p, self->state.core->next_replica());
}

namespace {

caf::expected<lane_offer> offer_ring_lane(stage_pointer self, const caf::actor_addr& sender) {
  auto& st = self->state;
  return ring_lane_shell::offer(self, st.ring_lanes.link, st.opts.ring_lanes, sender, st.ring_prev,
                                st.core->previous_replica(), names_of(self));
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
  deliver(self, self->state.ring_lanes.link.take(std::move(p), replica_name(self->state.core->previous_replica())));
}

void on_ring_lane_payload(stage_pointer self, lane_payload& p) {
  auto& st = self->state;
  if (p.side != lane_side::ring_in || st.core->phase() == member_phase::stopped) return;
  deliver(self, st.ring_lanes.link.payload(p.ticket, std::move(p.data), replica_name(st.core->previous_replica())));
}

void on_ring_lane_event(stage_pointer self, const lane_event& e) {
  auto& st = self->state;
  if (e.side == lane_side::ring_out)
    return ring_lane_shell::out_event(st.ring_lanes.link, e, st.core->phase() == member_phase::training,
                                      names_of(self));
  deliver(self, st.ring_lanes.link.in_closed(e.why, replica_name(st.core->previous_replica())));
}

}  // namespace troupe::stage_shell
