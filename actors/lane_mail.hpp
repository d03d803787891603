// lane_mail: how the threads of a bulk lane end (Note [Bulk lanes] in core/lane.hpp) tell
// the actor that owns it what happened: by local messages (lane_payload, lane_event),
// through a handle that does not keep the actor alive.
#pragma once

#include "actors/protocol.hpp"
#include "core/lane.hpp"

namespace troupe {

inline auto lane_mail(caf::actor_addr addr) {
  return [addr](auto msg) {
    if (auto a = caf::actor_cast<caf::actor>(addr)) caf::anon_send(a, std::move(msg));
  };
}

// A shard's: payloads and closed lanes, by member rank.
inline lane::shard_end::handlers shard_lane_handlers(caf::actor_addr addr) {
  auto tell = lane_mail(std::move(addr));
  return {[tell](std::uint32_t rank, std::uint64_t ticket, lane::arrival a) {
            tell(lane_payload{rank, ticket, std::move(a.data), a.finite});
          },
          [tell](std::uint32_t rank, const std::string& why) { tell(lane_event{rank, false, why}); }};
}

// A member's: opened and closed lanes and payloads, by shard.
inline lane::member_end::handlers member_lane_handlers(caf::actor_addr addr) {
  auto tell = lane_mail(std::move(addr));
  return {[tell](std::uint32_t s) { tell(lane_event{s, true, {}}); },
          [tell](std::uint32_t s, std::uint64_t ticket, tensor t) { tell(lane_payload{s, ticket, std::move(t)}); },
          [tell](std::uint32_t s, const std::string& why) { tell(lane_event{s, false, why}); }};
}

}  // namespace troupe
