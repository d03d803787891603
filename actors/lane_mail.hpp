// lane_mail: how the threads of a bulk lane end (Note [Bulk lanes] in transport/lane.hpp) tell
// the actor that owns it what happened: lane_payload and lane_event, by thread_mail, with
// the side of the lane they come from.
#pragma once

#include "actors/protocol.hpp"
#include "actors/thread_mail.hpp"
#include "transport/lane.hpp"

namespace troupe {

// A shard's: payloads and closed lanes, by member rank.
inline lane::shard_end::handlers shard_lane_handlers(caf::actor_addr addr) {
  auto tell = thread_mail(std::move(addr));
  return {[tell](std::uint32_t rank, std::uint64_t ticket, lane::arrival a) {
            tell(lane_payload{rank, ticket, std::move(a.data), a.finite});
          },
          [tell](std::uint32_t rank, const std::string& why) { tell(lane_event{rank, false, why}); }};
}

// A member's: opened and closed lanes and payloads, by shard.
inline lane::member_end::handlers member_lane_handlers(caf::actor_addr addr) {
  auto tell = thread_mail(std::move(addr));
  return {[tell](std::uint32_t s) { tell(lane_event{s, true, {}}); },
          [tell](std::uint32_t s, std::uint64_t ticket, tensor t) { tell(lane_payload{s, ticket, std::move(t)}); },
          [tell](std::uint32_t s, const std::string& why) { tell(lane_event{s, false, why}); }};
}

// A member's ring lanes (Note [Ring lanes] in core/ring_lanes.cpp): payloads and
// the closing of the lane from its previous replica, and the opening and closing of the
// lane to its next one, by replica.
inline lane::shard_end::handlers ring_in_handlers(caf::actor_addr addr) {
  auto tell = thread_mail(std::move(addr));
  return {[tell](std::uint32_t replica, std::uint64_t ticket, lane::arrival a) {
            tell(lane_payload{replica, ticket, std::move(a.data), a.finite, lane_side::ring_in});
          },
          [tell](std::uint32_t replica, const std::string& why) {
            tell(lane_event{replica, false, why, lane_side::ring_in});
          }};
}
inline lane::member_end::handlers ring_out_handlers(caf::actor_addr addr) {
  auto tell = thread_mail(std::move(addr));
  return {[tell](std::uint32_t replica) { tell(lane_event{replica, true, {}, lane_side::ring_out}); },
          [tell](std::uint32_t replica, std::uint64_t ticket, tensor t) {  // nothing comes back on a ring lane
            tell(lane_payload{replica, ticket, std::move(t), false, lane_side::ring_out});
          },
          [tell](std::uint32_t replica, const std::string& why) {
            tell(lane_event{replica, false, why, lane_side::ring_out});
          }};
}

}  // namespace troupe
