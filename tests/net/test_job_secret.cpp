// Tests for net/job_secret.cpp: a secret file is created once with mode 0600 and loads
// back; a file others can read, or one that holds no secret, is refused with a message
// naming it; a join proof matches only for the same secret, job, role and both nodes.
#define BOOST_TEST_MODULE job_secret
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>

#include <fstream>

#include "net/job_secret.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(a_created_secret_is_private_and_loads_back) {
  test::temp_dir dir("secret");
  const std::string path = dir.file("job.secret");
  auto made = create_job_secret(path);
  BOOST_REQUIRE(made.has_value());
  BOOST_TEST(made->size() == job_secret_hex_digits);
  struct stat st{};
  BOOST_REQUIRE(stat(path.c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0600u);
  auto loaded = load_job_secret(path);
  BOOST_REQUIRE(loaded.has_value());
  BOOST_TEST(*loaded == *made);
  BOOST_TEST(!create_job_secret(path).has_value(), "an existing secret is never overwritten");
  auto other = create_job_secret(dir.file("other.secret"));
  BOOST_REQUIRE(other.has_value());
  BOOST_TEST(*other != *made);
}

BOOST_AUTO_TEST_CASE(a_readable_or_malformed_file_is_refused_with_its_name) {
  test::temp_dir dir("secret");
  const std::string path = dir.file("job.secret");
  BOOST_REQUIRE(create_job_secret(path).has_value());
  chmod(path.c_str(), 0644);
  auto readable = load_job_secret(path);
  BOOST_REQUIRE(!readable.has_value());
  BOOST_TEST(readable.error().message.find("readable by other users") != std::string::npos, readable.error().message);
  const std::string junk = dir.file("junk.secret");
  std::ofstream(junk) << "not a secret\n";
  chmod(junk.c_str(), 0600);
  auto malformed = load_job_secret(junk);
  BOOST_REQUIRE(!malformed.has_value());
  BOOST_TEST(malformed.error().message.find(junk) != std::string::npos, malformed.error().message);
  auto missing = load_job_secret(dir.file("missing.secret"));
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().message.find("job.secret") != std::string::npos, missing.error().message);
}

BOOST_AUTO_TEST_CASE(a_proof_is_good_only_for_its_secret_job_role_and_nodes) {
  const std::string secret(64, 'a'), other(64, 'b');
  const std::string p = join_proof(secret, "job", "worker", "node-a", "coord");
  BOOST_TEST(p.size() == 64u);
  BOOST_TEST(proofs_match(join_proof(secret, "job", "worker", "node-a", "coord"), p));
  BOOST_TEST(!proofs_match(join_proof(other, "job", "worker", "node-a", "coord"), p));
  BOOST_TEST(!proofs_match(join_proof(secret, "job2", "worker", "node-a", "coord"), p));
  BOOST_TEST(!proofs_match(join_proof(secret, "job", "server", "node-a", "coord"), p));
  BOOST_TEST(!proofs_match(join_proof(secret, "job", "worker", "node-b", "coord"), p));
  BOOST_TEST(!proofs_match(join_proof(secret, "job", "worker", "node-a", "coord2"), p));
  // Fields cannot be shifted into each other.
  BOOST_TEST(!proofs_match(join_proof(secret, "jobw", "orker", "node-a", "coord"), p));
  BOOST_TEST(!proofs_match(p, ""));
  BOOST_TEST(!proofs_match("", ""));
}
