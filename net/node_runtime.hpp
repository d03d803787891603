// The actor system of a cluster node and the two network operations every role needs:
// publishing an actor on an address and reaching a published actor with a deadline,
// over plain BASP or, when the node has TLS files, over CAF's OpenSSL module only (a TLS
// node never opens a plain port: both would reach the same actors).
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/openssl/all.hpp>

#include <chrono>
#include <set>
#include <string>

#include "net/endpoint.hpp"
#include "net/node_options.hpp"

namespace troupe {

// Loads the middleman (and the OpenSSL manager with the plan's files and handshake
// deadline), turns heartbeats on, and registers the protocol types.
void configure_node(caf::actor_system_config& cfg, const node_plan& plan);

// Raises the soft RLIMIT_NOFILE to the hard limit (CAF aborts when accept() runs out of fds).
void raise_fd_limit();

// Keeps large message buffers on the heap (Note [Heap-resident message buffers]).
void tune_allocator();

// The middleman actor that opens connections for this node (TLS or plain).
caf::io::middleman_actor connector_of(caf::actor_system& sys, bool tls);

// Publishes `handle` (with its typed interface, which connecting nodes check) on `at`
// (port 0: any free port); returns the bound port.
template <class Handle>
caf::expected<std::uint16_t> publish_on(caf::actor_system& sys, const Handle& handle, const endpoint& at, bool tls) {
  const char* host = at.host.empty() ? nullptr : at.host.c_str();
  if (tls) return caf::openssl::publish(handle, at.port, host, true);
  return sys.middleman().publish(handle, at.port, host, true);
}

// Connects to the actor published at `to`, giving up after `deadline` (CAF's own
// remote_actor can wait forever). `signatures` receives the remote actor's interface.
caf::expected<caf::strong_actor_ptr> connect_to(caf::actor_system& sys, bool tls, const endpoint& to,
                                                std::chrono::milliseconds deadline,
                                                std::set<std::string>& signatures);

}  // namespace troupe
