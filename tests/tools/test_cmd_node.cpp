// End-to-end tests of `troupe node` (tools/cmd_node.cpp): a shard server's lane port that
// is not a port, or that another socket holds, is named before the node joins; a node
// started with --stop-when-stdin-closes stops when its stdin ends. Every run has a deadline.
#define BOOST_TEST_MODULE cmd_node
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/troupe_run.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

// A shard server's lane port (Note [Bulk lanes]): one that is not a port is a usage error,
// and one that another socket holds stops the node before it joins, saying which flag.
BOOST_AUTO_TEST_CASE(a_bad_or_taken_lane_port_is_named) {
  temp_dir dir("cli-lane-port");
  const std::string secret = dir.file("job.secret");
  BOOST_REQUIRE(run_troupe({"tls", "secret", secret}).exit_code == 0);
  const std::vector<std::string> server = {
      "node",          "--role", "server",    "--join", "127.0.0.1:1", "--insecure-network",
      "--secret-file", secret,   "--metrics", "off"};
  expect_usage_error(with(server, {"--lane-port", "seventy"}), {"--lane-port", "'seventy'"});

  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  BOOST_REQUIRE(::bind(held, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(held, 1) == 0);
  BOOST_REQUIRE(::getsockname(held, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  auto r = run_troupe(with(server, {"--lane-port", std::to_string(ntohs(a.sin_port))}), 30s);
  ::close(held);
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("cannot listen for bulk lanes") != std::string::npos);
  BOOST_TEST(r.err.find("(--lane-port)") != std::string::npos);
}

// Note [Nodes die with their launcher]: a node started with --stop-when-stdin-closes (as
// launch starts remote nodes over ssh) stops when its stdin ends, here while it is still
// trying to reach a coordinator it would otherwise wait 60 s for.
BOOST_AUTO_TEST_CASE(a_node_stops_when_its_stdin_closes) {
  temp_dir dir("cli-stdin");
  const std::string secret = dir.file("job.secret");
  BOOST_REQUIRE(run_troupe({"tls", "secret", secret}).exit_code == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_process({"/bin/sh", "-c",
                        "sleep 1 | " + troupe_bin() +
                            " node --role worker --join 127.0.0.1:1 --insecure-network "
                            "--secret-file " +
                            secret + " --metrics off --connect-timeout 60 --stop-when-stdin-closes"},
                       90s);
  const auto took = std::chrono::steady_clock::now() - t0;
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("stdin closed") != std::string::npos);
  BOOST_TEST(took < 20s);
}
