// Tests for transport/tls.cpp: the per-job CA and node certificates (private files, both
// client and server use), and one clear preflight message for each way TLS files go
// wrong: missing, key of another certificate, another CA, expired, encrypted without
// its passphrase; certificates carry the role their name gives, and a TLS directory
// serves each role its own certificate.
#define BOOST_TEST_MODULE tls
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "transport/tls.hpp"

using namespace troupe;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct pki {
  fs::path dir, other;
  pki() {
    dir = fs::temp_directory_path() / ("troupe-tls-" + std::to_string(::getpid()));
    other = dir / "other";
    BOOST_REQUIRE(create_ca(dir.string(), "test CA", 1h).has_value());
    BOOST_REQUIRE(create_ca(other.string(), "test CA", 1h).has_value());  // same name, another key
    BOOST_REQUIRE(issue_node_certificate(dir.string(), "good", {"IP:127.0.0.1"}, -60s, 1h).has_value());
    BOOST_REQUIRE(issue_node_certificate(dir.string(), "second", {"IP:127.0.0.1"}, -60s, 1h).has_value());
    BOOST_REQUIRE(issue_node_certificate(dir.string(), "expired", {"IP:127.0.0.1"}, -7200s, 3600s).has_value());
    BOOST_REQUIRE(issue_node_certificate(other.string(), "stranger", {"IP:127.0.0.1"}, -60s, 1h).has_value());
  }
  ~pki() { fs::remove_all(dir); }
  std::string at(const std::string& name) const { return (dir / name).string(); }
  tls_files files(const std::string& name) const { return {at(name + ".pem"), at(name + ".pem"), at("ca.pem"), ""}; }
};

std::string problem(const tls_files& f) {
  auto p = tls_preflight(f);
  return p ? *p : std::string();
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(issued_files_are_private_and_pass_preflight, pki) {
  BOOST_TEST(problem(files("good")).empty());
  struct stat st {};
  BOOST_REQUIRE(stat(dir.c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0700u);
  for (const char* f : {"ca.key", "ca.pem", "good.pem"}) {
    BOOST_REQUIRE(stat(at(f).c_str(), &st) == 0);
    BOOST_TEST((st.st_mode & 0777) == 0600u, f);
  }
  const tls_files in_dir = tls_files_in(dir.string(), "good");
  BOOST_TEST(in_dir.certificate == at("good.pem"));
  BOOST_TEST(in_dir.ca == at("ca.pem"));
  BOOST_TEST(tls_files_in(dir.string(), "worker").certificate == at("node.pem"));  // none of its own
}

BOOST_FIXTURE_TEST_CASE(certificates_carry_the_role_their_name_gives, pki) {
  BOOST_TEST(role_for_certificate_name("coordinator") == "coordinator");
  BOOST_TEST(role_for_certificate_name("server-1") == "server");
  BOOST_TEST(role_for_certificate_name("worker-12") == "worker");
  BOOST_TEST(role_for_certificate_name("node") == any_role);
  BOOST_TEST(role_for_certificate_name("w0") == any_role);
  BOOST_REQUIRE(issue_node_certificate(dir.string(), "worker-3", {"IP:127.0.0.1"}, -60s, 1h).has_value());
  const auto role_in = [&](const std::string& name) {
    std::FILE* f = std::fopen(at(name + ".pem").c_str(), "r");
    BOOST_REQUIRE(f != nullptr);
    X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    BOOST_REQUIRE(cert != nullptr);
    const std::string role = role_of_certificate(cert);
    X509_free(cert);
    return role;
  };
  BOOST_TEST(role_in("worker-3") == "worker");
  BOOST_TEST(role_in("good") == any_role);
  BOOST_TEST(role_of_certificate(nullptr).empty());
  BOOST_TEST(tls_files_in(dir.string(), "worker").certificate == at("node.pem"));
  BOOST_REQUIRE(issue_node_certificate(dir.string(), "worker", {"IP:127.0.0.1"}, -60s, 1h).has_value());
  BOOST_TEST(tls_files_in(dir.string(), "worker").certificate == at("worker.pem"));
}

BOOST_FIXTURE_TEST_CASE(each_failure_has_its_own_message, pki) {
  BOOST_TEST(problem({at("good.pem"), at("good.pem"), "", ""}).find("one of them is missing") != std::string::npos);
  BOOST_TEST(problem({at("nope.pem"), at("nope.pem"), at("ca.pem"), ""}).find("nope.pem: no such file") != std::string::npos);
  const std::string mismatch = problem({at("good.pem"), at("second.pem"), at("ca.pem"), ""});
  BOOST_TEST(mismatch.find("does not belong to the certificate") != std::string::npos, mismatch);
  const std::string foreign = problem({(other / "stranger.pem").string(), (other / "stranger.pem").string(), at("ca.pem"), ""});
  BOOST_TEST(foreign.find("does not verify against the CA") != std::string::npos, foreign);
  BOOST_TEST(foreign.find("local issuer") != std::string::npos, foreign);
  const std::string expired = problem(files("expired"));
  BOOST_TEST(expired.find("expired") != std::string::npos, expired);
  std::ofstream(at("junk.pem")) << "not a certificate\n";
  const std::string junk = problem({at("junk.pem"), at("good.pem"), at("ca.pem"), ""});
  BOOST_TEST(junk.find("cannot load the certificate") != std::string::npos, junk);
  const std::string bad_ca = problem({at("good.pem"), at("good.pem"), at("junk.pem"), ""});
  BOOST_TEST(bad_ca.find("cannot load the CA") != std::string::npos, bad_ca);
}

BOOST_AUTO_TEST_CASE(issuing_without_a_ca_fails_clearly) {
  auto r = issue_node_certificate("/nonexistent/ca-dir", "n", {}, 0s, 1h);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("cannot read the CA") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(encrypted_keys_need_their_passphrase, pki) {
  // Re-write good.pem's key encrypted with a passphrase.
  std::FILE* in = std::fopen(at("good.pem").c_str(), "r");
  BOOST_REQUIRE(in);
  EVP_PKEY* key = PEM_read_PrivateKey(in, nullptr, nullptr, nullptr);
  if (!key) {  // the certificate comes first in the file; the key follows it
    std::rewind(in);
    X509_free(PEM_read_X509(in, nullptr, nullptr, nullptr));
    key = PEM_read_PrivateKey(in, nullptr, nullptr, nullptr);
  }
  std::fclose(in);
  BOOST_REQUIRE(key);
  std::FILE* out = std::fopen(at("enc.key").c_str(), "w");
  char pass[] = "s3cret";
  BOOST_REQUIRE(PEM_write_PrivateKey(out, key, EVP_aes_256_cbc(), nullptr, 0, nullptr, pass) == 1);
  std::fclose(out);
  EVP_PKEY_free(key);
  tls_files f{at("good.pem"), at("enc.key"), at("ca.pem"), ""};
  const std::string none = problem(f);
  BOOST_TEST(none.find("give its passphrase") != std::string::npos, none);
  f.passphrase = "wrong";
  const std::string wrong = problem(f);
  BOOST_TEST(wrong.find("wrong passphrase") != std::string::npos, wrong);
  f.passphrase = "s3cret";
  BOOST_TEST(problem(f).empty());
}
