// `troupe launch --local` end to end: 2 shard servers and 2 workers as separate
// processes, mutual TLS on loopback, learn a 10k-sample Fashion-MNIST subset to >= 80% in
// each mode; a failing job makes launch fail; a bad flag is a usage error.
#define BOOST_TEST_MODULE launch
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(every_mode_learns_with_separate_processes) {
  for (const char* mode : {"sync", "async", "ssp"}) {
    auto r = run_process({troupe_bin(), "launch", "--local", "--servers", "2", "--workers", "2", "--mode", mode,
                          "--train-samples", "10000", "--epochs", "3"},
                         300s);
    BOOST_TEST_CONTEXT(mode) {
      BOOST_REQUIRE(!r.timed_out);
      BOOST_TEST_INFO("stderr: " << r.err);
      BOOST_REQUIRE(r.exit_code == 0);
      auto j = nlohmann::json::parse(r.out);
      BOOST_TEST(j["mode"].get<std::string>() == mode);
      BOOST_TEST(j["test_accuracy"].get<double>() >= 0.80);
      BOOST_TEST(r.err.find("mutual TLS") != std::string::npos);
      BOOST_TEST(r.err.find("[worker 1]") != std::string::npos);  // logs carry the role
    }
  }
}

BOOST_AUTO_TEST_CASE(a_pipeline_learns_with_a_process_per_stage) {
  // Stages reach each other directly over mutual TLS, as they would across hosts.
  auto r = run_process({troupe_bin(), "launch", "--local", "--servers", "1", "--replicas", "1", "--pipeline-stages",
                        "2", "--microbatches", "4", "--mode", "sync", "--train-samples", "10000", "--epochs", "3"},
                       300s);
  BOOST_REQUIRE(!r.timed_out);
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["pipeline_stages"].get<int>() == 2);
  BOOST_TEST(j["test_accuracy"].get<double>() >= 0.80);
  BOOST_TEST(r.err.find("bubble") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_failing_job_fails_the_launch) {
  auto r = run_process({troupe_bin(), "launch", "--local", "--dataset", "synthetic", "--train-samples", "2000", "--lr",
                        "1e6", "--warmup-epochs", "0"},
                       120s);
  BOOST_REQUIRE(!r.timed_out);
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("diverged") != std::string::npos, r.err);
  BOOST_TEST(r.out.empty());
}

BOOST_AUTO_TEST_CASE(bad_flags_are_usage_errors) {
  auto r = run_process({troupe_bin(), "launch", "--local", "--mode", "bsp"}, 30s);
  BOOST_TEST(r.exit_code == 2);
  auto neither = run_process({troupe_bin(), "launch"}, 30s);
  BOOST_TEST(neither.exit_code == 2);
  BOOST_TEST(neither.err.find("--local") != std::string::npos);
}
