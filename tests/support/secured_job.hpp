// Test helpers for a job's security with real processes on loopback: a private CA with
// one certificate per role (plus another CA's, and an expired one, for strangers), and a
// coordinator of a small job under attack that must afterwards run a real job to its
// normal result.
#pragma once

#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "net/job_secret.hpp"
#include "tests/support/background.hpp"
#include "tests/support/http.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "transport/tls.hpp"

namespace troupe::test {

inline std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The job's CA with certificates named coordinator, server, worker and expired, and
// another CA (same name) with a certificate named stranger; all for IP:127.0.0.1. Also
// the job's secret, and another job's.
struct job_pki {
  temp_dir scratch{"pki"};
  std::filesystem::path dir = scratch.path;
  std::filesystem::path other = dir / "other";
  job_pki() {
    using namespace std::chrono_literals;
    BOOST_REQUIRE(create_ca(dir.string(), "job CA", 1h).has_value());
    BOOST_REQUIRE(create_ca(other.string(), "job CA", 1h).has_value());
    for (const char* n : {"coordinator", "server", "worker"})
      BOOST_REQUIRE(issue_node_certificate(dir.string(), n, {"IP:127.0.0.1"}, -60s, 1h).has_value());
    BOOST_REQUIRE(issue_node_certificate(dir.string(), "expired", {"IP:127.0.0.1"}, -7200s, 3600s).has_value());
    BOOST_REQUIRE(issue_node_certificate(other.string(), "stranger", {"IP:127.0.0.1"}, -60s, 1h).has_value());
    BOOST_REQUIRE(create_job_secret(secret()).has_value());
    BOOST_REQUIRE(create_job_secret(other_secret()).has_value());
  }
  std::string secret() const { return (dir / "job.secret").string(); }
  std::string other_secret() const { return (other / "job.secret").string(); }
  std::string pem(const std::string& n) const { return (dir / (n + ".pem")).string(); }
  std::string ca() const { return (dir / "ca.pem").string(); }
  std::string stranger() const { return (other / "stranger.pem").string(); }
  std::string other_ca() const { return (other / "ca.pem").string(); }
  // The TLS flags of a node holding certificate n.
  std::vector<std::string> certs(const std::string& n) const {
    return {"--tls-cert", pem(n), "--tls-key", pem(n), "--tls-ca", ca()};
  }
  // The flags of a member of the job holding certificate n: its certificate and the secret.
  std::vector<std::string> tls(const std::string& n) const { return cat(certs(n), {"--secret-file", secret()}); }
  // The flags of a plain-TCP member of the job.
  std::vector<std::string> plain() const { return {"--insecure-network", "--secret-file", secret()}; }
};

// troupe_refusals_total{reason=...} as the node whose metrics are at `metrics_port` says
// now; -1 when they cannot be read.
inline double refusals_at(int metrics_port, const std::string& reason) {
  const auto text = http_get(metrics_port, "/metrics");
  if (!text) return -1;
  const std::string key = "reason=\"" + reason + "\"";
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("troupe_refusals_total{", 0) == 0 && line.find(key) != std::string::npos)
      return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

// A coordinator of job `id` (1 epoch, 1 worker, 1 server, synthetic data) started with
// `flags`; its port is known once constructed.
struct coordinator_under_attack {
  temp_dir dir{"attacked"};
  std::string id;
  std::unique_ptr<background_process> coord;
  int port = 0, metrics_port = 0;

  coordinator_under_attack(std::string job_id, const std::vector<std::string>& flags) : id(std::move(job_id)) {
    using namespace std::chrono_literals;
    coord = std::make_unique<background_process>(
        cat({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:0", "--job-id", id, "--dataset",
             "synthetic", "--train-samples", "2000", "--epochs", "1", "--workers", "1", "--servers", "1"},
            flags),
        dir.file("coordinator"));
    const auto p = coord->wait_for_port("listening on ", 60s);
    BOOST_REQUIRE_MESSAGE(p.has_value(), coord->err());
    port = *p;
    const auto m = coord->wait_for_port("metrics on http://", 10s);
    BOOST_REQUIRE_MESSAGE(m.has_value(), coord->err());
    metrics_port = *m;
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  double refusals(const std::string& reason) const { return refusals_at(metrics_port, reason); }

  // The share of one core the coordinator used over `window`.
  double cpu_share(std::chrono::milliseconds window) const {
    const double before = coord->cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(window);
    const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
    return (coord->cpu_seconds() - before) / wall.count();
  }

  // A server and a worker with these flags join; the job must end normally with nobody lost.
  void runs_a_real_job(const std::vector<std::string>& server_flags, const std::vector<std::string>& worker_flags) {
    using namespace std::chrono_literals;
    background_process s(cat({troupe_bin(), "node", "--role", "server", "--join", address(), "--job-id", id}, server_flags),
                         dir.file("server"));
    background_process w(cat({troupe_bin(), "node", "--role", "worker", "--join", address(), "--job-id", id}, worker_flags),
                         dir.file("worker"));
    const auto code = coord->wait(120s);
    BOOST_REQUIRE_MESSAGE(code.has_value(), "the job did not end: " << coord->err() << "\nworker: " << w.err()
                                                                     << "\nserver: " << s.err());
    BOOST_TEST(*code == 0, coord->err() << w.err() << s.err());
    const auto result = nlohmann::json::parse(coord->out());
    BOOST_TEST(result["workers_lost"].get<int>() == 0);
    BOOST_TEST(result["rejected_messages"].get<int>() == 0);
    BOOST_TEST((w.wait(20s) == std::optional<int>(0)), w.err());
  }
};

}  // namespace troupe::test
