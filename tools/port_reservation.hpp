// port_reservation: a loopback port held for a child process that binds it later.
//
// `troupe launch --local` must tell every node the coordinator's port (and each node its
// metrics port) before the node that listens there has started. Picking a free port and
// releasing it races with every other process that binds port 0 meanwhile (a Prometheus
// started beside the job took the coordinator's port that way). A reservation instead
// keeps a bound, non-listening SO_REUSEADDR socket on the port for the whole job:
// - the kernel never hands a bound port to anyone else's bind(port 0) or connect();
// - the child that listens there (CAF's acceptor and the metrics server both set
//   SO_REUSEADDR) may still bind it, because Linux lets SO_REUSEADDR sockets share a port
//   as long as at most one of them listens.
// The socket is close-on-exec, so children never inherit it.
#pragma once

#include <cstdint>

#include "base/expected.hpp"

namespace troupe::cli {

class port_reservation {
 public:
  // Reserves a port on 127.0.0.1 picked by the kernel.
  static expected<port_reservation> on_loopback();

  port_reservation(port_reservation&& other) noexcept;
  port_reservation& operator=(port_reservation&& other) noexcept;
  port_reservation(const port_reservation&) = delete;
  port_reservation& operator=(const port_reservation&) = delete;
  ~port_reservation();

  std::uint16_t port() const { return port_; }

 private:
  port_reservation(int fd, std::uint16_t port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace troupe::cli
