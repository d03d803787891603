// Tests for net/basp_frame_guard.cpp and net/frame_guard.cpp with real processes on
// loopback: a frame header claiming 4 GiB, sent to a coordinator by anyone over plain TCP
// or by a holder of a job certificate over TLS, closes that connection at once; the
// coordinator's memory grows by no more than the job's bound; and the same coordinator
// then runs a real job to its normal result.
#define BOOST_TEST_MODULE frame_guard
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "net/tls.hpp"
#include "tests/support/attack.hpp"
#include "tests/support/background.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A coordinator of a small job; `security` says how it and its members talk.
struct coordinator_under_attack {
  temp_dir dir{"frame"};
  std::vector<std::string> security;
  std::unique_ptr<background_process> coord;
  int port = 0;

  explicit coordinator_under_attack(std::vector<std::string> sec) : security(std::move(sec)) {
    coord = std::make_unique<background_process>(
        cat({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:0", "--job-id", "frame-job",
             "--dataset", "synthetic", "--train-samples", "2000", "--epochs", "1", "--workers", "1", "--servers", "1"},
            security),
        dir.file("coordinator"));
    const auto p = coord->wait_for_port("listening on ", 60s);
    BOOST_REQUIRE_MESSAGE(p.has_value(), coord->err());
    port = *p;
  }

  // A server and a worker join; the job must end normally.
  void runs_a_real_job() {
    const std::string at = "127.0.0.1:" + std::to_string(port);
    background_process s(cat({troupe_bin(), "node", "--role", "server", "--join", at, "--job-id", "frame-job"}, security),
                         dir.file("server"));
    background_process w(cat({troupe_bin(), "node", "--role", "worker", "--join", at, "--job-id", "frame-job"}, security),
                         dir.file("worker"));
    const auto code = coord->wait(120s);
    BOOST_REQUIRE(code.has_value());
    BOOST_TEST(*code == 0, coord->err());
    BOOST_TEST(nlohmann::json::parse(coord->out())["workers_lost"].get<int>() == 0);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(an_oversized_frame_over_plain_tcp_closes_the_connection_and_allocates_nothing) {
  coordinator_under_attack c({"--insecure-network"});
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
  c.runs_a_real_job();
}

BOOST_AUTO_TEST_CASE(a_certificate_holders_oversized_frame_is_refused_too) {
  temp_dir pki("frame-pki");
  BOOST_REQUIRE(create_ca(pki.path.string(), "job CA", 1h).has_value());
  for (const char* n : {"coordinator", "server", "worker"})
    BOOST_REQUIRE(issue_node_certificate(pki.path.string(), n, {"IP:127.0.0.1"}, -60s, 1h).has_value());
  auto tls = [&](const char* n) {
    return std::vector<std::string>{"--tls-cert", pki.file(std::string(n) + ".pem"), "--tls-key",
                                    pki.file(std::string(n) + ".pem"), "--tls-ca", pki.file("ca.pem")};
  };
  coordinator_under_attack c(tls("coordinator"));
  const long before = c.coord->rss_mib();
  {
    tls_client attacker(c.port, pki.file("worker.pem"), pki.file("ca.pem"));
    BOOST_REQUIRE(attacker.connected());
    BOOST_REQUIRE(attacker.send(basp_header(0xFFFFFFFFu)));
    BOOST_TEST(attacker.closed_by_peer(1s));
  }
  BOOST_TEST(c.coord->rss_mib() - before < 16, "grew from " << before << " MiB to " << c.coord->rss_mib());
  c.security = tls("worker");  // the members' own certificates
  c.runs_a_real_job();
}
