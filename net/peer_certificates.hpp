// Which certificate each peer node presented, as this process's transport saw it: the TLS
// handshake guard records the peer certificate of every finished handshake by socket, and
// the route guard records which node a socket carries once CAF's BASP learns it, so that
// a node's messages can be tied to the certificate they came under (Note [Certificate
// roles] in net/tls_handshake_guard.cpp). Thread-safe.
#pragma once

#include <optional>
#include <string>

namespace troupe {

struct peer_certificate {
  std::string subject;  // one line, as OpenSSL prints it: /CN=worker-0/OU=worker
  std::string role;     // its OU; empty when it names none
};

// A TLS handshake on socket fd finished with the peer presenting `c`.
void record_handshake(int fd, peer_certificate c);
// The TLS session on fd is gone (the socket may be reused).
void forget_handshake(int fd);
// BASP learned that fd carries node `node` (as caf::to_string names it).
void record_route(int fd, const std::string& node);
// BASP dropped the route over fd.
void forget_route(int fd);

// The certificate node `node` presented on its direct connection to this process;
// nullopt when it has none (no TLS, or not connected directly).
std::optional<peer_certificate> certificate_of(const std::string& node);

}  // namespace troupe
