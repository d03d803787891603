// port_reservation: see the header for why a bound, non-listening socket holds the port.
#include "tools/port_reservation.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace troupe::cli {

expected<port_reservation> port_reservation::on_loopback() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto fail = [&](const char* what) -> expected<port_reservation> {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return failure{std::string("cannot reserve a loopback port (") + what + ": " + why +
                   "); pass --port to choose the coordinator's port"};
  };
  if (fd < 0) return fail("socket");
  const int on = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0) return fail("SO_REUSEADDR");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return fail("bind");
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return fail("getsockname");
  return port_reservation(fd, ntohs(a.sin_port));
}

port_reservation::port_reservation(port_reservation&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}

port_reservation& port_reservation::operator=(port_reservation&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

port_reservation::~port_reservation() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace troupe::cli
