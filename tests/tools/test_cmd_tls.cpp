// End-to-end tests of `troupe tls` (tools/cmd_tls.cpp): `tls init` and `tls secret` write
// files private to the user and replace nothing that exists.
#define BOOST_TEST_MODULE cmd_tls
#include <sys/stat.h>

#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.hpp"
#include "tests/support/troupe_run.hpp"

using namespace troupe::test;

// tls init writes a CA, the job's secret and certificates, private to the user; tls secret
// writes only a secret; neither replaces what exists.
BOOST_AUTO_TEST_CASE(tls_init_and_tls_secret_write_private_files_and_replace_nothing) {
  temp_dir dir("cli-tls");
  const auto mode = [](const std::string& path) {
    struct stat st {};
    BOOST_REQUIRE(stat(path.c_str(), &st) == 0);
    return st.st_mode & 0777;
  };
  const std::string pki = dir.file("pki");
  auto init = run_troupe({"tls", "init", pki, "--node", "w", "--san", "IP:127.0.0.1"});
  BOOST_REQUIRE_MESSAGE(init.exit_code == 0, init.err);
  for (const char* f : {"ca.key", "w.pem", "job.secret"}) BOOST_TEST(mode(pki + "/" + f) == 0600u, f);
  auto again = run_troupe({"tls", "init", pki});
  BOOST_TEST(again.exit_code == 2);
  BOOST_TEST(again.err.find("--force") != std::string::npos, again.err);

  const std::string secret = dir.file("job.secret");
  auto made = run_troupe({"tls", "secret", secret});
  BOOST_REQUIRE_MESSAGE(made.exit_code == 0, made.err);
  BOOST_TEST(mode(secret) == 0600u);
  std::string before;
  std::getline(std::ifstream(secret), before);
  BOOST_TEST(before.size() == 64u);
  auto twice = run_troupe({"tls", "secret", secret});
  BOOST_TEST(twice.exit_code == 1);
  BOOST_TEST(twice.err.find(secret) != std::string::npos, twice.err);
  std::string after;
  std::getline(std::ifstream(secret), after);
  BOOST_TEST(after == before);
}
