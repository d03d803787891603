// Refusals made for the job's safety: every frame, connection or message a node turned
// away because of who sent it or what it claimed, counted process-wide by reason (the
// registry exports troupe_refusals_total{reason}) and remembered per peer, so that each
// peer is logged once per reason however many times it tries. Thread-safe; the transport
// guards call it from CAF's multiplexer thread, the shells from their actors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::monitoring {

enum class refusal : std::uint8_t {
  oversized_frame,     // a frame header longer than the job's bound
  handshake_deadline,  // a TLS handshake that did not finish in time
  handshake_cap,       // a TLS handshake evicted because too many were pending
  unproven_join,       // a join without proof of the job's secret
  not_a_member,        // a member's message from a node that does not hold that rank
  not_the_coordinator, // a coordinator's request from any other node
  not_a_neighbour,     // a pipeline message from a node that is not the stage's neighbour
  wrong_role,          // a dialled peer whose certificate is for another role
  wrong_host,          // a dialled peer whose certificate does not name the host dialled
  lane_refused,        // a bulk lane connection without a handshake, hello or token the shard accepts
};
inline constexpr std::size_t refusal_kinds = 10;

std::string_view name_of(refusal r);

// Counts one refusal of `peer` (an address or node id; empty when the transport cannot
// tell) and says whether to log it: true the first time this peer is refused for this
// reason, and for an unknown peer at most once a minute.
bool count_refusal(refusal r, std::string_view peer);

// Refusals for this reason since the process started.
std::uint64_t refusals(refusal r);

}  // namespace troupe::monitoring
