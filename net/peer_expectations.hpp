// What a node expects of each peer it dials: the host it dialled, which the peer's TLS
// certificate must name, and the role the peer must hold. The dialling code declares it
// before each connection; the TLS handshake guard checks the peer's certificate against
// it (Note [Certificate roles] in net/tls_handshake_guard.cpp). Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace troupe {

struct peer_expectation {
  std::string host;  // as dialled: a DNS name or an IP address
  std::string role;  // "coordinator", "server" or "worker"
};

// Declares that connections to host:port (every address the name resolves to) must reach
// a peer with `role`; a later declaration for the same address replaces it. False when
// the host does not resolve (the dial will fail on its own).
bool expect_peer(const std::string& host, std::uint16_t port, const std::string& role);

// The expectation for a connection whose peer is ip:port (numeric, as getpeername gives
// it); nullopt when nobody declared one.
std::optional<peer_expectation> expectation_for(const std::string& ip, std::uint16_t port);

}  // namespace troupe
