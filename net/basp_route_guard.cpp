// Tells net/peer_certificates which node each connection carries: interposes CAF 0.17's
// caf::io::basp::routing_table::add_direct and erase_direct, which libcaf_io calls through
// its PLT when a BASP handshake finishes and when a connection goes. A connection handle
// of CAF's default multiplexer is its socket. Linked into each executable that runs nodes
// (Note [Certificate roles] in net/tls_handshake_guard.cpp).
#include <caf/io/basp/routing_table.hpp>
#include <caf/node_id.hpp>
#include <dlfcn.h>

#include "net/peer_certificates.hpp"

namespace caf::io::basp {

void routing_table::add_direct(const connection_handle& hdl, const node_id& nid) {
  using real_fn = void (*)(routing_table*, const connection_handle&, const node_id&);
  static const auto real = reinterpret_cast<real_fn>(
      dlsym(RTLD_NEXT, "_ZN3caf2io4basp13routing_table10add_directERKNS0_17connection_handleERKNS_7node_idE"));
  troupe::record_route(static_cast<int>(hdl.id()), to_string(nid));
  real(this, hdl, nid);
}

node_id routing_table::erase_direct(const connection_handle& hdl) {
  using real_fn = node_id (*)(routing_table*, const connection_handle&);
  static const auto real = reinterpret_cast<real_fn>(
      dlsym(RTLD_NEXT, "_ZN3caf2io4basp13routing_table12erase_directERKNS0_17connection_handleE"));
  troupe::forget_route(static_cast<int>(hdl.id()));
  return real(this, hdl);
}

}  // namespace caf::io::basp
