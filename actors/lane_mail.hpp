// lane_mail: how the threads of a bulk lane end (Note [Bulk lanes] in core/lane.hpp) tell
// the actor that owns it what happened: lane_payload and lane_event, by thread_mail.
#pragma once

#include "actors/protocol.hpp"
#include "actors/thread_mail.hpp"
#include "core/lane.hpp"

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

}  // namespace troupe
