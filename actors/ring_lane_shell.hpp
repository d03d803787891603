// ring_lane_shell: what a ring member's actor does with its bulk lanes to its neighbours on
// other hosts (Note [Ring lanes] in core/ring_lanes.cpp), one implementation for every kind
// of ring member: the training stage (actors/stage_ring_lane.cpp) and the key-value member
// in a ring of users' loops (client/kv_ring_lane.cpp). It asks the next member for a lane,
// offers its own listener to the previous member (and to nobody else), and follows the
// lane to the next member opening and closing. The lanes' state and the order of the
// pieces are ring_lanes' (core/ring_lanes.hpp), which the actor keeps in its state for as
// long as it lives (the answers to its lane requests find it there).
#pragma once

#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "actors/lane_mail.hpp"
#include "actors/protocol.hpp"
#include "core/ring_lanes.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::ring_lane_shell {

// How the log and the errors name a ring member and its neighbours.
struct names {
  std::string who, next, prev_role;  // "worker 1", "worker 2", "previous worker"
  std::string log_prefix;            // before `who` in the log only ("troupe.kv: "), never in errors
};

// Asks `next` (member `next_id` of the lane, at `host`) for a lane when `ends` can dial one,
// it lives on another node and none was asked for yet; until it opens, and for good if it
// is refused, the pieces go in the messages.
template <class Self>
void ask(Self* self, ring_lanes& rl, const ring_lane_ends& ends, const stage_actor& next, std::uint32_t next_id,
         const std::string& host, std::chrono::milliseconds timeout, const names& n) {
  if (rl.out() != ring_lanes::out_state::unasked || !ends.dialler || !next || next.node() == self->node()) return;
  rl.asked(ends.dialler());
  rl.out_end().start(ring_out_handlers(caf::actor_cast<caf::actor_addr>(self)));
  self->request(next, timeout, ring_atom::value, lane_open_atom::value)
      .then([&rl, next_id, host](const lane_offer& offer) { rl.out_end().open(next_id, host, offer); },
            [&rl, n](caf::error& e) {
              rl.out_closed();
              spdlog::info("{}{}: no bulk lane to {} ({}); its ring pieces go in the messages", n.log_prefix, n.who,
                           n.next, describe(e));
            });
}

// An offer of this member's ring lane listener to `sender`, which must be `prev` (member
// `prev_id` of the lane), or why not. The listener is made with the first offer.
template <class Self>
caf::expected<lane_offer> offer(Self* self, ring_lanes& rl, const ring_lane_ends& ends, const caf::actor_addr& sender,
                                const stage_actor& prev, std::uint32_t prev_id, const names& n) {
  if (!prev || sender != prev.address()) {
    const std::string peer = caf::to_string(sender);
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, peer))
      spdlog::warn("{}{}: refused a ring lane to {}, which is not its {} in the ring", n.log_prefix, n.who, peer,
                   n.prev_role);
    return make_error(errc::not_member, "only the " + n.prev_role + " in the ring may open a ring lane to " + n.who);
  }
  if (!ends.listener) return make_error(errc::bad_job, n.who + " has no bulk lanes (--no-bulk-lanes)");
  if (!rl.has_in()) {
    auto made = ends.listener();
    if (!made || !*made)
      return make_error(errc::bad_job, n.who + " cannot take a ring lane: " +
                                           (made ? std::string("no lane listener") : made.error().message));
    rl.listen(std::move(*made));
    rl.in_end().start(ring_in_handlers(caf::actor_cast<caf::actor_addr>(self)));
  }
  auto o = rl.in_end().offer(prev_id);
  if (!o) return make_error(errc::bad_job, n.who + " cannot offer a ring lane: " + o.error().message);
  rl.in_offered();
  return *o;
}

// The lane to the next member opened, or closed (said while `training`: the pieces go in
// the messages from now on).
inline void out_event(ring_lanes& rl, const lane_event& e, bool training, const names& n) {
  if (e.opened) {
    rl.out_opened();
    spdlog::info("{}{}: sends its ring pieces to {} over a bulk lane", n.log_prefix, n.who, n.next);
    return;
  }
  if (rl.out_closed() && training)
    spdlog::info("{}{}: the bulk lane to {} closed ({}); its ring pieces go in the messages", n.log_prefix, n.who,
                 n.next, e.why);
}

}  // namespace troupe::ring_lane_shell
