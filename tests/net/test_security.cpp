// Transport security with real processes on loopback. A coordinator with mutual TLS
// refuses a client without a certificate, one from another CA, one with an expired
// certificate, a plain (non-TLS) CAF node, garbage bytes, and a join recorded from a real
// node and replayed from a raw socket; afterwards it still serves its own members and the
// job completes. Listening off loopback without TLS is refused, and each preflight
// failure has its own message.
#define BOOST_TEST_MODULE security
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "net/tls.hpp"
#include "tests/support/background.hpp"
#include "tests/support/process.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

int connect_tcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the peer closes (or resets) the connection within `timeout`.
bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;
  }
  return false;
}

// A TLS client built directly on OpenSSL (so it can present what a Troupe node's own
// preflight would refuse). True if the server refused it: the handshake failed, or the
// server closed the connection before answering.
bool tls_client_refused(int port, const std::string& cert, const std::string& ca) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (!cert.empty()) {
    SSL_CTX_use_certificate_chain_file(ctx, cert.c_str());
    SSL_CTX_use_PrivateKey_file(ctx, cert.c_str(), SSL_FILETYPE_PEM);
  }
  SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr);
  const int fd = connect_tcp(port);
  BOOST_REQUIRE(fd >= 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  bool refused = SSL_connect(ssl) != 1;
  if (!refused) {
    // TLS 1.3: the server checks the client's certificate after the client's handshake is
    // done; a refusal arrives as an alert on the first read.
    const char hello[] = "hello";
    SSL_write(ssl, hello, sizeof hello);
    char buf[64];
    refused = SSL_read(ssl, buf, sizeof buf) <= 0;
  }
  SSL_free(ssl);
  close(fd);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  return refused;
}

// Forwards one TCP connection from listen_port to target_port and records what the
// client sent.
class recording_proxy {
 public:
  recording_proxy(int listen_port, int target_port) : target_(target_port) {
    lfd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(listen_port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(lfd_, 1);
    thread_ = std::thread([this] { run(); });
  }
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
  int lfd_ = -1, target_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string client_bytes_;
  std::thread thread_;
};

struct pki {
  fs::path dir = fs::temp_directory_path() / ("troupe-sec-" + std::to_string(::getpid()));
  fs::path other = dir / "other";
  pki() {
    BOOST_REQUIRE(create_ca(dir.string(), "job CA", 1h).has_value());
    BOOST_REQUIRE(create_ca(other.string(), "job CA", 1h).has_value());
    for (const char* n : {"coordinator", "server", "worker"})
      BOOST_REQUIRE(issue_node_certificate(dir.string(), n, {"IP:127.0.0.1"}, -60s, 1h).has_value());
    BOOST_REQUIRE(issue_node_certificate(dir.string(), "expired", {"IP:127.0.0.1"}, -7200s, 3600s).has_value());
    BOOST_REQUIRE(issue_node_certificate(other.string(), "stranger", {"IP:127.0.0.1"}, -60s, 1h).has_value());
  }
  ~pki() { fs::remove_all(dir); }
  std::string pem(const std::string& n) const { return (dir / (n + ".pem")).string(); }
  std::string ca() const { return (dir / "ca.pem").string(); }
  std::vector<std::string> tls(const std::string& n) const {
    return {"--tls-cert", pem(n), "--tls-key", pem(n), "--tls-ca", ca()};
  }
};

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(strangers_are_refused_and_members_still_served, pki) {
  const int port = 17411, plain_port = 17412, proxy_port = 17413;
  const std::string log = (dir / "log").string();
  background_process coord(cat({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:17411",
                                "--job-id", "secure-job", "--dataset", "synthetic", "--train-samples", "4000",
                                "--epochs", "1", "--workers", "1", "--servers", "1"},
                               tls("coordinator")),
                           log + "-coord");
  BOOST_REQUIRE(coord.wait_for_err("listening on", 60s));

  // A plain CAF node and a node whose certificate comes from another CA.
  auto plain = run_process({troupe_bin(), "node", "--role", "worker", "--join", "127.0.0.1:17411", "--job-id",
                            "secure-job", "--connect-timeout", "3"},
                           30s);
  BOOST_TEST(plain.exit_code == 1, plain.err);
  const std::string stranger = (other / "stranger.pem").string();
  auto foreign = run_process({troupe_bin(), "node", "--role", "worker", "--join", "127.0.0.1:17411", "--job-id",
                              "secure-job", "--connect-timeout", "3", "--tls-cert", stranger, "--tls-key", stranger,
                              "--tls-ca", (other / "ca.pem").string()},
                             30s);
  BOOST_TEST(foreign.exit_code == 1, foreign.err);

  // Raw TLS clients: none, another CA's and an expired certificate.
  BOOST_TEST(tls_client_refused(port, "", ca()));
  BOOST_TEST(tls_client_refused(port, stranger, ca()));
  BOOST_TEST(tls_client_refused(port, pem("expired"), ca()));
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
    background_process plain_coord({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:17412",
                                    "--job-id", "secure-job", "--dataset", "synthetic", "--train-samples", "2000",
                                    "--workers", "1", "--servers", "1", "--stall-timeout", "30"},
                                   log + "-plain");
    BOOST_REQUIRE(plain_coord.wait_for_err("listening on", 60s));
    recording_proxy proxy(proxy_port, plain_port);
    background_process recorded_worker({troupe_bin(), "node", "--role", "worker", "--join", "127.0.0.1:17413",
                                        "--job-id", "secure-job"},
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
  BOOST_REQUIRE(coord.running());
  background_process s(cat({troupe_bin(), "node", "--role", "server", "--join", "127.0.0.1:17411", "--job-id",
                            "secure-job"},
                           tls("server")),
                       log + "-server");
  background_process w(cat({troupe_bin(), "node", "--role", "worker", "--join", "127.0.0.1:17411", "--job-id",
                            "secure-job"},
                           tls("worker")),
                       log + "-worker");
  const auto code = coord.wait(120s);
  BOOST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0, coord.err());
  const auto j = nlohmann::json::parse(coord.out());
  BOOST_TEST(j["workers_lost"].get<int>() == 0);
  BOOST_TEST(j["rejected_messages"].get<int>() == 0);
  BOOST_TEST(coord.err().find("stands by") == std::string::npos, coord.err());
  BOOST_TEST((w.wait(20s) == std::optional<int>(0)), w.err());
}

BOOST_AUTO_TEST_CASE(listening_off_loopback_without_tls_is_refused) {
  auto r = run_process({troupe_bin(), "node", "--role", "coordinator", "--listen", "0.0.0.0:0"}, 30s);
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(r.err.find("without TLS") != std::string::npos, r.err);
  BOOST_TEST(r.err.find("--insecure-network") != std::string::npos, r.err);
}

BOOST_FIXTURE_TEST_CASE(each_preflight_failure_has_its_own_message, pki) {
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
  const std::string stranger = (other / "stranger.pem").string();
  BOOST_TEST(refused(stranger, stranger, ca()).find("does not verify against the CA") != std::string::npos);
  BOOST_TEST(refused(pem("expired"), pem("expired"), ca()).find("expired") != std::string::npos);
}
