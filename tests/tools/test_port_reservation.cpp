// Tests for tools/port_reservation.cpp: a reserved port is never handed to anyone else's
// bind(port 0), yet the child that listens there may bind it; releasing frees it.
#define BOOST_TEST_MODULE port_reservation
#include <boost/test/unit_test.hpp>

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <vector>

#include "tools/port_reservation.hpp"

using troupe::cli::port_reservation;

namespace {

// A socket on 127.0.0.1:port (0: the kernel picks), with or without SO_REUSEADDR;
// returns the fd (or -1) and writes the bound port.
int bind_loopback(std::uint16_t port, bool reuse, std::uint16_t* bound = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  if (reuse) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (bound) *bound = ntohs(a.sin_port);
  return fd;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_listener_binds_a_reserved_port_and_strangers_cannot) {
  auto r = port_reservation::on_loopback();
  BOOST_REQUIRE(r);
  BOOST_REQUIRE(r->port() != 0);
  // A process that asks for that port by number without SO_REUSEADDR is refused.
  BOOST_TEST(bind_loopback(r->port(), false) == -1);
  // The node it was reserved for (SO_REUSEADDR, as CAF and the metrics server set) binds
  // and listens.
  const int listener = bind_loopback(r->port(), true);
  BOOST_REQUIRE(listener >= 0);
  BOOST_TEST(listen(listener, 4) == 0);
  close(listener);
}

BOOST_AUTO_TEST_CASE(the_kernel_never_hands_a_reserved_port_to_a_port_0_bind) {
  // Many reservations and many port-0 binds (with SO_REUSEADDR, as Go's listeners set):
  // were reserved ports available, tens of the binds would land on one of them.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 4096);
  setrlimit(RLIMIT_NOFILE, &files);
  const int budget = static_cast<int>(files.rlim_cur) - 64;
  const int reservations = budget / 6, binds = budget / 2;
  BOOST_REQUIRE(reservations >= 100);
  std::set<std::uint16_t> reserved_ports;
  std::vector<port_reservation> held;
  for (int i = 0; i < reservations; ++i) {
    auto r = port_reservation::on_loopback();
    BOOST_REQUIRE(r);
    reserved_ports.insert(r->port());
    held.push_back(std::move(*r));
  }
  BOOST_TEST(reserved_ports.size() == held.size());
  std::vector<int> fds;
  int collisions = 0;
  for (int i = 0; i < binds; ++i) {
    std::uint16_t port = 0;
    const int fd = bind_loopback(0, true, &port);
    BOOST_REQUIRE(fd >= 0);
    fds.push_back(fd);
    collisions += reserved_ports.count(port);
  }
  BOOST_TEST(collisions == 0);
  for (int fd : fds) close(fd);
}

BOOST_AUTO_TEST_CASE(a_released_port_is_free_again) {
  std::uint16_t port = 0;
  {
    auto r = port_reservation::on_loopback();
    BOOST_REQUIRE(r);
    port = r->port();
    auto moved = std::move(*r);
    BOOST_TEST(moved.port() == port);
    BOOST_TEST(bind_loopback(port, false) == -1);
  }
  const int fd = bind_loopback(port, false);
  BOOST_TEST(fd >= 0);
  if (fd >= 0) close(fd);
}
