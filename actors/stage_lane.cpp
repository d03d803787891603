// stage_lane: a training member's bulk lanes to the shards it reaches over the network
// (Note [Bulk lanes] in transport/lane.hpp), through the member_lanes that every kind of member
// uses (actors/member_lanes.hpp): which shards may have one (those its links send over the
// network: transport/shard_links.hpp), and how an answer reaches the core.
#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

// The lanes, made (and the lane end told where to report) at the first use; nullptr when
// this node has no lane end.
lane::lanes_to_shards* lanes_of(stage_pointer self) {
  auto& st = self->state;
  if (!st.opts.lanes) return nullptr;
  if (!st.lanes) {
    st.lanes.emplace(st.opts.lanes, st.shards.size(), who(self));
    st.lanes->start(caf::actor_cast<caf::actor_addr>(self));
  }
  return &*st.lanes;
}

// Whether shard s is reached by its address (a lane needs its host), and its link says
// its calls go over the network.
bool over_the_network(stage_pointer self, std::uint32_t s) {
  auto& st = self->state;
  return st.core->place().shard_hosts.size() > s && st.links->over_the_network(s);
}

// Routes a call to shard s onto its bulk lane where it may take one (member_lanes::route),
// with `answer_bytes` of answer to come; the answer's ticket (0: in the message).
template <class Msg>
std::uint64_t route(stage_pointer self, std::uint32_t s, Msg& msg, std::size_t answer_bytes) {
  auto* lanes = lanes_of(self);
  if (!lanes || !over_the_network(self, s)) return 0;
  const auto& place = self->state.core->place();
  return lanes->route(self, self->state.shards[s], s, place.rank, place.shard_hosts.at(s),
                      std::chrono::milliseconds(place.job.request_timeout_ms), msg, answer_bytes);
}

}  // namespace

std::uint64_t route_on_lane(stage_pointer self, std::uint32_t s, kv_pull& r) {
  const auto numel = r.piece_numel > 0 ? r.piece_numel : self->state.core->slice_numel(s);
  return route(self, s, r, static_cast<std::size_t>(numel) * sizeof(float));
}

void route_on_lane(stage_pointer self, std::uint32_t s, kv_push& g) { route(self, s, g, 0); }

void on_lane_reply(stage_pointer self, std::uint32_t s, std::uint64_t asked, kv_pull_reply p) {
  auto done = [self, s](std::variant<kv_pull_reply, fault> r) {
    // A closed lane fails its waiting answers one after another; the first may stop the member.
    if (self->state.core->phase() == member_phase::stopped) return;
    if (auto* f = std::get_if<fault>(&r)) {
      const std::string why = f->detail;
      drive(self, [&](member_core& c) { return c.on_pull_failed(s, why); });
      return;
    }
    drive(self, [&](member_core& c) { return c.on_params(s, std::move(std::get<kv_pull_reply>(r))); });
  };
  auto* lanes = lanes_of(self);
  if (!lanes) return done(lane::lanes_to_shards::unasked(s));
  lanes->on_reply(s, asked, std::move(p), std::move(done));
}

void abandon_lane_reply(stage_pointer self, std::uint32_t s, std::uint64_t ticket) {
  if (self->state.lanes) self->state.lanes->abandon(s, ticket);
}

void on_lane_payload(stage_pointer self, lane_payload& p) {
  if (p.side != lane_side::shards) return on_ring_lane_payload(self, p);
  if (self->state.lanes) self->state.lanes->on_payload(p);
}

void on_lane_event(stage_pointer self, const lane_event& e) {
  if (e.side != lane_side::shards) return on_ring_lane_event(self, e);
  if (self->state.lanes) self->state.lanes->on_event(e);
}

}  // namespace troupe::stage_shell
