// Tests for net/basp_frame_guard.cpp with real processes on loopback: a frame header
// claiming 4 GiB, sent to a coordinator by anyone over plain TCP or by a holder of a job
// certificate over TLS, closes that connection at once; the coordinator's memory grows by
// no more than the job's bound; and the same coordinator then runs a real job to its
// normal result.
#define BOOST_TEST_MODULE frame_guard
#include <boost/test/unit_test.hpp>

#include "tests/support/attack.hpp"
#include "tests/support/secured_job.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

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
  c.runs_a_real_job(tls("server"), tls("worker"));
}
