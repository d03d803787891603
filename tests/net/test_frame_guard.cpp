// Tests for net/basp_frame_guard.cpp with real processes on loopback: a frame header
// claiming 4 GiB, sent to a coordinator by anyone over plain TCP or by a holder of a job
// certificate over TLS, closes that connection at once; the coordinator's memory grows by
// no more than the job's bound; a legitimate peer is served within a second while the
// attack goes on; and the same coordinator then runs a real job to its normal result.
#define BOOST_TEST_MODULE frame_guard
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <functional>
#include <thread>

#include "tests/support/attack.hpp"
#include "tests/support/secured_job.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

// Runs `attack` over and over on its own thread until destroyed.
class flood {
 public:
  explicit flood(std::function<void()> attack)
      : thread_([this, attack = std::move(attack)] {
          while (!stop_) attack();
        }) {}
  ~flood() {
    stop_ = true;
    thread_.join();
  }
  flood(const flood&) = delete;
  flood& operator=(const flood&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

using steady = std::chrono::steady_clock;

// Whether a plain TCP client hears the node's BASP handshake within a second.
bool plain_peer_served_within_a_second(int port) {
  const auto start = steady::now();
  const int fd = connect_tcp(port);
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  char byte = 0;
  const bool heard = poll(&p, 1, 1000) == 1 && read(fd, &byte, 1) == 1;
  close(fd);
  return heard && steady::now() - start < 1s;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(an_oversized_frame_over_plain_tcp_closes_the_connection_and_allocates_nothing, job_pki) {
  coordinator_under_attack c("frame-job", plain());
  const long before = c.coord->rss_mib();
  for (int i = 0; i < 4; ++i) {
    const int fd = connect_tcp(c.port);
    BOOST_REQUIRE(fd >= 0);
    const std::string h = basp_header(0xFFFFFFFFu);
    BOOST_REQUIRE(write(fd, h.data(), h.size()) == static_cast<ssize_t>(h.size()));
    BOOST_TEST(closed_by_peer(fd, 1s));
    close(fd);
  }
  BOOST_TEST(c.coord->rss_mib() - before < 16, "grew from " << before << " MiB to " << c.coord->rss_mib());
  BOOST_TEST(c.coord->err().find("refused a frame of 4294967295 bytes") != std::string::npos, c.coord->err());
  {
    flood attack([&] {
      const int fd = connect_tcp(c.port);
      if (fd < 0) return;
      const std::string h = basp_header(0xFFFFFFFFu);
      if (write(fd, h.data(), h.size()) > 0) closed_by_peer(fd, 1s);
      close(fd);
    });
    for (int i = 0; i < 3; ++i) BOOST_TEST(plain_peer_served_within_a_second(c.port), "attempt " << i);
  }
  c.runs_a_real_job(plain(), plain());
}

BOOST_FIXTURE_TEST_CASE(a_certificate_holders_oversized_frame_is_refused_too, job_pki) {
  coordinator_under_attack c("frame-job", tls("coordinator"));
  const long before = c.coord->rss_mib();
  {
    tls_client attacker(c.port, pem("worker"), ca());
    BOOST_REQUIRE(attacker.connected());
    BOOST_REQUIRE(attacker.send(basp_header(0xFFFFFFFFu)));
    BOOST_TEST(attacker.closed_by_peer(1s));
  }
  BOOST_TEST(c.coord->rss_mib() - before < 16, "grew from " << before << " MiB to " << c.coord->rss_mib());
  {
    flood attack([&] {
      tls_client attacker(c.port, pem("worker"), ca());
      if (attacker.send(basp_header(0xFFFFFFFFu))) attacker.closed_by_peer(1s);
    });
    for (int i = 0; i < 3; ++i) {
      const auto start = steady::now();
      tls_client legitimate(c.port, pem("worker"), ca());
      BOOST_TEST(legitimate.connected(), "attempt " << i);
      BOOST_TEST(legitimate.receives_within(1s), "attempt " << i);
      BOOST_TEST(std::chrono::duration<double>(steady::now() - start).count() < 1.0, "attempt " << i);
    }
  }
  BOOST_TEST(c.refusals("oversized_frame") >= 2);
  c.runs_a_real_job(tls("server"), tls("worker"));
}
