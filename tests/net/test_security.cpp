// Transport security with real processes on loopback. A coordinator with mutual TLS
// refuses a client without a certificate, one from another CA, one with an expired
// certificate, a plain (non-TLS) CAF node, garbage bytes, and a join recorded from a real
// node and replayed from a raw socket; afterwards it still serves its own members and the
// job completes. A node without TLS is refused at start, on loopback too, and each
// preflight failure has its own message. A node with the job's certificate but without a
// secret does not start; with another job's secret it is refused at the join; a secret file
// others can read is refused at start. A node that dials a peer refuses a certificate of
// another role (a worker's presented as the coordinator), one issued for another host, and
// a wildcard from a CA that is not the job's; the coordinator refuses a join as a shard
// under a worker's certificate.
#define BOOST_TEST_MODULE security
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "tests/support/attack.hpp"
#include "tests/support/secured_job.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// Forwards one TCP connection from a port the kernel picks to target_port and records
// what the client sent.
class recording_proxy {
 public:
  explicit recording_proxy(int target_port) : target_(target_port) {
    lfd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(lfd_, 1);
    thread_ = std::thread([this] { run(); });
  }
  int port() const { return port_; }
  ~recording_proxy() {
    stop_ = true;
    thread_.join();
    close(lfd_);
  }
  std::string recorded() {
    std::lock_guard<std::mutex> g(mu_);
    return client_bytes_;
  }

 private:
  void run() {
    pollfd lp{lfd_, POLLIN, 0};
    while (!stop_ && poll(&lp, 1, 100) <= 0) {
    }
    if (stop_) return;
    const int c = accept(lfd_, nullptr, nullptr);
    const int s = connect_tcp(target_);
    char buf[65536];
    while (!stop_) {
      pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
      if (poll(p, 2, 100) <= 0) continue;
      if (p[0].revents) {
        const ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0) break;
        {
          std::lock_guard<std::mutex> g(mu_);
          client_bytes_.append(buf, static_cast<size_t>(n));
        }
        write(s, buf, static_cast<size_t>(n));
      }
      if (p[1].revents) {
        const ssize_t n = read(s, buf, sizeof buf);
        if (n <= 0) break;
        write(c, buf, static_cast<size_t>(n));
      }
    }
    close(c);
    close(s);
  }
  int lfd_ = -1, port_ = 0, target_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string client_bytes_;
  std::thread thread_;
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(strangers_are_refused_and_members_still_served, job_pki) {
  coordinator_under_attack c("secure-job", tls("coordinator"));
  const int port = c.port;
  const std::string at = c.address();
  const std::string log = (dir / "log").string();

  // A plain CAF node and a node whose certificate comes from another CA.
  auto plain_node = run_process(cat({troupe_bin(), "node", "--role", "worker", "--join", at, "--job-id", "secure-job",
                                     "--connect-timeout", "3"},
                                    plain()),
                                30s);
  BOOST_TEST(plain_node.exit_code == 1, plain_node.err);
  auto foreign = run_process({troupe_bin(), "node", "--role", "worker", "--join", at, "--job-id", "secure-job",
                              "--connect-timeout", "3", "--tls-cert", stranger(), "--tls-key", stranger(), "--tls-ca",
                              other_ca(), "--secret-file", other_secret()},
                             30s);
  BOOST_TEST(foreign.exit_code == 1, foreign.err);

  // Raw TLS clients: none, another CA's and an expired certificate.
  BOOST_TEST(tls_client(port, "", ca()).refused());
  BOOST_TEST(tls_client(port, stranger(), ca()).refused());
  BOOST_TEST(tls_client(port, pem("expired"), ca()).refused());
  // Garbage bytes.
  const int g = connect_tcp(port);
  BOOST_REQUIRE(g >= 0);
  std::string junk(2048, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 131 + 7);
  write(g, junk.data(), junk.size());
  BOOST_TEST(closed_by_peer(g, 10s));
  close(g);

  // Record a real node's join to a plain coordinator of the same job, then replay it.
  std::string recorded;
  {
    background_process plain_coord(cat({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:0",
                                        "--job-id", "secure-job", "--dataset", "synthetic", "--train-samples", "2000",
                                        "--workers", "1", "--servers", "1", "--stall-timeout", "30"},
                                       plain()),
                                   log + "-plain");
    const auto plain_port = plain_coord.wait_for_port("listening on ", 60s);
    BOOST_REQUIRE_MESSAGE(plain_port.has_value(), plain_coord.err());
    recording_proxy proxy(*plain_port);
    background_process recorded_worker(cat({troupe_bin(), "node", "--role", "worker", "--join",
                                            "127.0.0.1:" + std::to_string(proxy.port()), "--job-id", "secure-job"},
                                           plain()),
                                       log + "-recorded");
    for (int i = 0; i < 100 && proxy.recorded().size() < 200; ++i) std::this_thread::sleep_for(50ms);
    std::this_thread::sleep_for(500ms);
    recorded = proxy.recorded();
  }
  BOOST_TEST_MESSAGE("recorded " << recorded.size() << " bytes of a plain join");
  BOOST_REQUIRE(recorded.size() > 64);
  const int r = connect_tcp(port);
  BOOST_REQUIRE(r >= 0);
  write(r, recorded.data(), recorded.size());
  BOOST_TEST(closed_by_peer(r, 10s));
  close(r);

  // The coordinator is alive and admitted no one: its own members join and finish the job.
  BOOST_REQUIRE(c.coord->running());
  c.runs_a_real_job(tls("server"), tls("worker"));
  BOOST_TEST(c.coord->err().find("stands by") == std::string::npos, c.coord->err());
}

BOOST_FIXTURE_TEST_CASE(a_node_without_tls_is_refused_on_loopback_too, job_pki) {
  for (const char* listen : {"0.0.0.0:0", "127.0.0.1:0"}) {
    auto r = run_process({troupe_bin(), "node", "--role", "coordinator", "--listen", listen, "--secret-file", secret()},
                         30s);
    BOOST_TEST(r.exit_code == 2);
    BOOST_TEST(r.err.find("no TLS certificate") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("--insecure-network") != std::string::npos, r.err);
  }
  auto r = run_process({troupe_bin(), "node", "--role", "worker", "--join", "127.0.0.1:1", "--connect-timeout", "1"}, 30s);
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(r.err.find("no TLS certificate") != std::string::npos, r.err);
}

BOOST_FIXTURE_TEST_CASE(each_preflight_failure_has_its_own_message, job_pki) {
  auto refused = [&](const std::string& cert, const std::string& key, const std::string& ca_file) {
    auto r = run_process({troupe_bin(), "node", "--role", "worker", "--join", "127.0.0.1:1", "--tls-cert", cert,
                          "--tls-key", key, "--tls-ca", ca_file},
                         30s);
    BOOST_TEST(r.exit_code == 2);
    return r.err;
  };
  BOOST_TEST(refused(pem("worker"), pem("worker"), "/nonexistent/ca.pem").find("/nonexistent/ca.pem: no such file") !=
             std::string::npos);
  BOOST_TEST(refused(pem("worker"), pem("server"), ca()).find("does not belong to the certificate") != std::string::npos);
  BOOST_TEST(refused(stranger(), stranger(), ca()).find("does not verify against the CA") != std::string::npos);
  BOOST_TEST(refused(pem("expired"), pem("expired"), ca()).find("expired") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(a_node_without_the_job_s_secret_is_refused_before_it_learns_anything, job_pki) {
  coordinator_under_attack c("secret-job", tls("coordinator"));
  const auto join = [&](const std::vector<std::string>& secret_flags) {
    return run_process(cat(cat({troupe_bin(), "node", "--role", "worker", "--join", c.address(), "--job-id", "secret-job",
                                "--connect-timeout", "10"},
                               certs("worker")),
                           secret_flags),
                       60s);
  };
  // A valid certificate of the job but no secret: the node will not start.
  auto none = join({});
  BOOST_TEST(none.exit_code == 2, none.err);
  BOOST_TEST(none.err.find("no job secret") != std::string::npos, none.err);
  // Another job's secret: the coordinator refuses the join.
  auto r = join({"--secret-file", other_secret()});
  BOOST_TEST(r.exit_code == 1, r.err);
  BOOST_TEST(r.err.find("refused") != std::string::npos, r.err);
  BOOST_TEST(r.err.find("--secret-file") != std::string::npos, r.err);
  BOOST_TEST(r.err.find("samples per epoch") == std::string::npos, "a refused node learned the job: " << r.err);
  BOOST_TEST(c.refusals("unproven_join") == 1);
  BOOST_TEST(c.coord->err().find("without proof of the job's secret") != std::string::npos, c.coord->err());
  c.runs_a_real_job(tls("server"), tls("worker"));
}

BOOST_FIXTURE_TEST_CASE(a_secret_file_others_can_read_is_refused_at_start, job_pki) {
  chmod(secret().c_str(), 0640);
  auto r = run_process({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:0", "--secret-file", secret()},
                       30s);
  BOOST_TEST(r.exit_code == 2, r.err);
  BOOST_TEST(r.err.find("readable by other users") != std::string::npos, r.err);
}

namespace {

// A worker of `job` joining the coordinator at `at` with the job's worker certificate and
// secret; its result once it ended.
process_result worker_joins(const job_pki& pki, const std::string& at, const std::string& job) {
  using namespace std::chrono_literals;
  return run_process(cat({troupe_bin(), "node", "--role", "worker", "--join", at, "--job-id", job, "--connect-timeout",
                          "5", "--metrics", "off"},
                         pki.tls("worker")),
                     60s);
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_dialled_coordinator_must_hold_its_role_and_the_host_dialled, job_pki) {
  BOOST_REQUIRE(issue_node_certificate(dir.string(), "coordinator-elsewhere", {"IP:127.0.0.2"}, -60s, 1h).has_value());
  BOOST_REQUIRE(
      issue_node_certificate(other.string(), "coordinator-wild", {"DNS:*", "DNS:localhost", "IP:127.0.0.1"}, -60s, 1h)
          .has_value());
  struct posing {
    std::vector<std::string> flags;
    std::string refusal;  // in the worker's log
  };
  const std::string wild = (other / "coordinator-wild.pem").string();
  for (const auto& p : std::vector<posing>{
           {cat(certs("worker"), {"--secret-file", secret()}), "its certificate is for the role 'worker', not 'coordinator'"},
           {cat(certs("coordinator-elsewhere"), {"--secret-file", secret()}), "its certificate does not name 127.0.0.1"},
           {{"--tls-cert", wild, "--tls-key", wild, "--tls-ca", other_ca(), "--secret-file", secret()}, ""}}) {
    BOOST_TEST_CONTEXT(p.flags[1]) {
      coordinator_under_attack c("role-job", p.flags);
      auto w = worker_joins(*this, c.address(), "role-job");
      BOOST_TEST(w.exit_code == 1, w.err);
      BOOST_TEST(w.err.find("cannot reach the coordinator") != std::string::npos, w.err);
      BOOST_TEST(w.err.find(p.refusal) != std::string::npos, w.err);
      BOOST_TEST(w.err.find("samples per epoch") == std::string::npos, "the worker joined: " << w.err);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(a_stolen_worker_certificate_cannot_act_as_a_shard, job_pki) {
  coordinator_under_attack c("shard-job", tls("coordinator"));
  // The holder of a worker's certificate and the secret asks to join as the job's shard.
  auto impostor = run_process(cat({troupe_bin(), "node", "--role", "server", "--join", c.address(), "--job-id",
                                   "shard-job", "--connect-timeout", "10", "--metrics", "off"},
                                  tls("worker")),
                              60s);
  BOOST_TEST(impostor.exit_code == 1, impostor.err);
  BOOST_TEST(impostor.err.find("refused") != std::string::npos, impostor.err);
  BOOST_TEST(impostor.err.find("samples per epoch") == std::string::npos, "the impostor learned the job: " << impostor.err);
  BOOST_TEST(c.refusals("wrong_role") == 1);
  BOOST_TEST(c.coord->wait_for_err("under the certificate /CN=worker/OU=worker, which is for the role worker", 5s),
             c.coord->err());
  // The job's own shard and worker then train it.
  c.runs_a_real_job(tls("server"), tls("worker"));
  BOOST_TEST(c.coord->err().find("server node") != std::string::npos, c.coord->err());
  BOOST_TEST(c.coord->err().find("joins under the certificate /CN=server/OU=server") != std::string::npos, c.coord->err());
}
