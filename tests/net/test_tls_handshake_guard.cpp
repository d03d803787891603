// Tests for net/tls_handshake_guard.cpp with real processes on loopback: a TLS coordinator
// holding half-open handshakes (nothing sent, or half a ClientHello) stays near idle and
// closes them at their deadline; 200 idle connections cost it no CPU either, the ones
// over the cap are closed at once, a legitimate client still finishes its handshake
// within a second, and a real job trains to its normal result while an attacker keeps
// reopening them. Every refusal shows in the coordinator's metrics. A node whose connect
// attempts CAF gave up on mid-handshake exits without waiting for their deadlines.
#define BOOST_TEST_MODULE tls_handshake_guard
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/support/attack.hpp"
#include "tests/support/secured_job.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

// Keeps `n` TCP connections to a port open without ever starting TLS; with `reopen`,
// replaces the ones the server closed every 500 ms.
class idle_connections {
 public:
  idle_connections(int port, int n) : port_(port) {
    for (int i = 0; i < n; ++i) fds_.push_back(connect_tcp(port_));
  }
  ~idle_connections() {
    stop_ = true;
    if (reopener_.joinable()) reopener_.join();
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }
  idle_connections(const idle_connections&) = delete;
  idle_connections& operator=(const idle_connections&) = delete;

  // Connections the server has closed so far (they stay counted until reopened).
  int closed_by_server() {
    int n = 0;
    for (int fd : fds_) n += fd < 0 || closed_by_peer(fd, 1ms) ? 1 : 0;
    return n;
  }
  void keep_reopening() {
    reopener_ = std::thread([this] {
      while (!stop_) {
        for (int& fd : fds_)
          if (fd < 0 || closed_by_peer(fd, 1ms)) {
            if (fd >= 0) close(fd);
            fd = connect_tcp(port_);
          }
        for (int i = 0; i < 5 && !stop_; ++i) std::this_thread::sleep_for(100ms);
      }
    });
  }

 private:
  int port_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread reopener_;
};

// A TCP port on 127.0.0.1 that takes connections (the kernel completes them) and never
// answers: a coordinator too busy to reach its handshakes.
struct silent_listener {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  silent_listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    BOOST_REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    BOOST_REQUIRE(listen(fd, 16) == 0);
    BOOST_REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0);
    port = ntohs(a.sin_port);
  }
  ~silent_listener() { close(fd); }
  silent_listener(const silent_listener&) = delete;
  silent_listener& operator=(const silent_listener&) = delete;
};

}  // namespace

// Note [Abandoned handshakes]: BASP's connection timeout drops each connect attempt while
// its TLS handshake waits for the silent peer; the worker gives up at --connect-timeout,
// and its exit must not wait for the abandoned handshakes' 60 s deadline (it did: a worker
// whose first connect to its shard was dropped outlived its job by that deadline).
BOOST_FIXTURE_TEST_CASE(a_node_exits_without_waiting_for_handshakes_it_gave_up_on, job_pki) {
  silent_listener coordinator;
  temp_dir logs("abandoned");
  background_process w(cat({troupe_bin(), "node", "--role", "worker", "--join",
                            "127.0.0.1:" + std::to_string(coordinator.port), "--job-id", "handshake-job",
                            "--connection-timeout", "0.5", "--connect-timeout", "2", "--tls-handshake-timeout", "60",
                            "--metrics", "off"},
                           tls("worker")),
                       logs.file("worker"));
  const auto code = w.wait(30s);
  BOOST_REQUIRE_MESSAGE(code.has_value(), "the worker was still running 30 s after its 2 s connect timeout: " << w.err());
  BOOST_TEST(*code != 0);
  BOOST_TEST(w.err().find("cannot reach the coordinator") != std::string::npos, w.err());
  BOOST_TEST(w.err().find("did not finish within") == std::string::npos, w.err());
}

BOOST_FIXTURE_TEST_CASE(held_half_open_handshakes_cost_no_cpu_and_end_at_their_deadline, job_pki) {
  coordinator_under_attack c("handshake-job", cat(tls("coordinator"), {"--tls-handshake-timeout", "2"}));
  const int silent = connect_tcp(c.port);
  const int half = connect_tcp(c.port);
  BOOST_REQUIRE(silent >= 0 && half >= 0);
  // A TLS record header announcing 512 bytes of ClientHello, and nothing more.
  const std::string partial("\x16\x03\x01\x02\x00", 5);
  BOOST_REQUIRE(write(half, partial.data(), partial.size()) == 5);
  std::this_thread::sleep_for(300ms);
  const double cpu = c.cpu_share(1500ms);
  BOOST_TEST(cpu < 0.1, "the coordinator used " << cpu << " of a core while two handshakes waited");
  BOOST_TEST(closed_by_peer(silent, 3s));
  BOOST_TEST(closed_by_peer(half, 3s));
  close(silent);
  close(half);
  // Counted before the socket closes; logged just after.
  BOOST_TEST(c.refusals("handshake_deadline") == 2);
  BOOST_TEST(c.coord->wait_for_err("did not finish within 2000 ms", 2s), c.coord->err());
  c.runs_a_real_job(tls("server"), tls("worker"));
}

BOOST_FIXTURE_TEST_CASE(two_hundred_idle_connections_cost_no_cpu_and_a_real_job_still_trains, job_pki) {
  coordinator_under_attack c("handshake-job", tls("coordinator"));
  idle_connections idle(c.port, 200);
  std::this_thread::sleep_for(1s);
  BOOST_TEST(idle.closed_by_server() == 200 - 64, "over the cap of 64, the oldest are closed at once");
  const double cpu = c.cpu_share(2s);
  BOOST_TEST(cpu < 0.1, "the coordinator used " << cpu << " of a core while 200 connections idled");
  BOOST_TEST(c.refusals("handshake_cap") == 200 - 64);

  idle.keep_reopening();
  tls_client legitimate(c.port, pem("worker"), ca());
  BOOST_TEST(legitimate.connected());
  BOOST_TEST(legitimate.receives_within(1s), "a certificate holder's connection was not served within a second");
  c.runs_a_real_job(tls("server"), tls("worker"));
}
