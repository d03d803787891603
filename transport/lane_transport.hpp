// lane_transport: the bulk lanes' ends over TCP or TLS (Note [Bulk lanes] in
// transport/lane.hpp): a shard node's listener, which welcomes only connections that show a
// token it offered to a member, and a member's dialler. Each welcomed connection has a
// thread that reads or writes its payloads; a node's transport ends with its process or,
// in tests, when the last reference to it goes (its threads are joined).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/expected.hpp"
#include "transport/lane.hpp"
#include "transport/tls.hpp"

namespace troupe::lane {

struct transport_options {
  tls_context tls;  // null: plain TCP (--insecure-network)
  // A new connection's TLS handshake, hello and welcome must all finish within this.
  std::chrono::milliseconds handshake_timeout{10000};
  // A payload that makes no progress this long means the peer is gone (--connection-timeout).
  std::chrono::milliseconds idle_timeout{5000};
  // With TLS, the role a dialled listener's certificate must hold: "server" for a shard,
  // "worker" for a ring neighbour (Note [Ring lanes] in core/ring_lanes.cpp). A
  // listener always takes workers' connections only.
  std::string dialled_role = "server";
  // A listener's readers scan each f32 payload for NaN and Inf (a shard's gradients: Note
  // [Scanned on arrival] in transport/lane.hpp); a ring neighbour's pieces need no scan.
  bool scan_finite = true;
  // How a listener's log lines and refusals name it and the peers its lanes come from: a
  // shard's lanes come from workers (by rank), a member's ring lane from its previous
  // replica (by replica).
  std::string listener_name = "shard";
  std::string peer_name = "worker";
};

// Connections that may be between accept and welcome at once; more are closed at once.
inline constexpr std::size_t max_pending_hellos = 16;
// How long an offer's token may be shown.
inline constexpr std::chrono::seconds offer_lifetime{60};

// A shard's end listening on host:port (port 0: any free one).
class listening_end : public shard_end {
 public:
  virtual std::uint16_t port() const = 0;
};
expected<std::shared_ptr<listening_end>> listen_for_members(const std::string& host, std::uint16_t port,
                                                            transport_options o);

// A member's end, dialling the shards (or, with dialled_role "worker", the ring
// neighbours) it is offered.
std::shared_ptr<member_end> dial_shards(transport_options o);

}  // namespace troupe::lane
