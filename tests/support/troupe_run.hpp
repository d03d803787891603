// Test support: runs the troupe binary with a deadline, and checks a usage error (exit 2,
// stderr naming each fragment), and the flags of a quick job. For the end-to-end CLI tests.
#pragma once

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

namespace troupe::test {

inline process_result run_troupe(std::vector<std::string> args,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  args.insert(args.begin(), troupe_bin());
  auto r = run_process(args, timeout);
  BOOST_REQUIRE_MESSAGE(!r.timed_out, "troupe did not finish in time");
  return r;
}

inline void expect_usage_error(const std::vector<std::string>& args, const std::vector<std::string>& fragments) {
  auto r = run_troupe(args);
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_TEST(r.exit_code == 2);
  for (const auto& f : fragments) BOOST_TEST(r.err.find(f) != std::string::npos, "stderr names '" << f << "'");
}

// A job on 5,000 synthetic samples for 1 epoch: seconds, and well above chance.
inline const std::vector<std::string> quick = {"--dataset", "synthetic", "--train-samples", "5000", "--epochs", "1"};

inline std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace troupe::test
