// Tests for tools/launch_node_flags.cpp: locally each node gets a reserved loopback port of
// its own for its metrics, over ssh 9400, 9401, ... on its host, each listed for
// Prometheus; --metrics off gives none; a trace file per node in its job directory; only
// the coordinator gets --save-model; --device cuda spreads each host's workers over its
// GPUs and leaves the coordinator and shards alone; --precision and --tf32 go to workers.
#define BOOST_TEST_MODULE launch_node_flags
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "tools/launch_node_flags.hpp"

using namespace troupe;
using namespace troupe::cli;

namespace {

// The value after `flag` in `flags`; empty when the flag is not there.
std::string value_of(const std::vector<std::string>& flags, const std::string& flag) {
  auto it = std::find(flags.begin(), flags.end(), flag);
  return it == flags.end() || it + 1 == flags.end() ? std::string() : *(it + 1);
}

bool has(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

}  // namespace

BOOST_AUTO_TEST_CASE(local_nodes_each_get_a_reserved_metrics_port_listed_for_prometheus) {
  launch_node_flags flags({.local = true, .metrics_linger_s = 2.5});
  std::set<std::string> addresses;
  for (const std::string node : {"coordinator", "server-0", "worker-0", "worker-1"}) {
    const auto f = flags.of(node, "localhost", "/job");
    const std::string at = value_of(f, "--metrics");
    BOOST_TEST(at.rfind("127.0.0.1:", 0) == 0, at);
    BOOST_TEST(at != "127.0.0.1:0", at);
    BOOST_TEST(value_of(f, "--metrics-linger") == "2.5");
    addresses.insert(at);
  }
  BOOST_TEST(addresses.size() == 4u);  // no two nodes share a port
  BOOST_TEST(flags.reservation_error().empty());
  BOOST_REQUIRE(flags.targets().size() == 4u);
  BOOST_TEST(flags.targets()[2].node == "worker-0");
  BOOST_TEST(addresses.count(flags.targets()[2].address) == 1u);
  BOOST_TEST(flags.traces().empty());
  BOOST_TEST(flags.reserve() != 0);
}

BOOST_AUTO_TEST_CASE(ssh_nodes_count_up_from_9400_and_are_scraped_at_their_host) {
  launch_node_flags flags({.local = false, .trace = true, .trace_events = 1000});
  const auto a = flags.of("coordinator", "alpha", "/tmp/troupe-job");
  const auto b = flags.of("worker-0", "beta", "/tmp/troupe-job");
  BOOST_TEST(value_of(a, "--metrics") == "0.0.0.0:9400");
  BOOST_TEST(value_of(b, "--metrics") == "0.0.0.0:9401");
  BOOST_REQUIRE(flags.targets().size() == 2u);
  BOOST_TEST(flags.targets()[1].address == "beta:9401");
  BOOST_TEST(value_of(b, "--trace") == "/tmp/troupe-job/trace-worker-0.json");
  BOOST_TEST(value_of(b, "--trace-events") == "1000");
  BOOST_TEST(flags.traces() == (std::vector<std::string>{"/tmp/troupe-job/trace-coordinator.json",
                                                         "/tmp/troupe-job/trace-worker-0.json"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(metrics_off_reserves_nothing_and_lists_no_target) {
  launch_node_flags flags({.metrics = "off"});
  const auto f = flags.of("server-1", "localhost", "/job");
  BOOST_TEST(f == (std::vector<std::string>{"--metrics", "off"}), boost::test_tools::per_element());
  BOOST_TEST(flags.targets().empty());
}

BOOST_AUTO_TEST_CASE(only_the_coordinator_saves_the_model) {
  launch_node_flags flags({.metrics = "off", .save_model = "/out/model.tf"});
  BOOST_TEST(value_of(flags.of("coordinator", "h", "/job"), "--save-model") == "/out/model.tf");
  BOOST_TEST(!has(flags.of("server-0", "h", "/job"), "--save-model"));
  BOOST_TEST(!has(flags.of("worker-0", "h", "/job"), "--save-model"));
}

BOOST_AUTO_TEST_CASE(cuda_spreads_each_hosts_workers_over_its_gpus) {
  launch_node_flags flags({.metrics = "off", .device = "cuda", .tf32 = true, .precision = "bf16"});
  BOOST_TEST(value_of(flags.of("worker-0", "alpha", "/job"), "--device") == "cuda:0");
  BOOST_TEST(value_of(flags.of("worker-1", "beta", "/job"), "--device") == "cuda:0");
  const auto third = flags.of("worker-2", "alpha", "/job");
  BOOST_TEST(value_of(third, "--device") == "cuda:1");
  BOOST_TEST(has(third, "--tf32"));
  BOOST_TEST(value_of(third, "--precision") == "bf16");
  for (const std::string node : {"coordinator", "server-0"}) {
    const auto f = flags.of(node, "alpha", "/job");
    BOOST_TEST(!has(f, "--device"), node);
    BOOST_TEST(!has(f, "--precision"), node);
  }
  BOOST_TEST(value_of(flags.of("worker-3", "alpha", "/job"), "--device") == "cuda:2");  // the others took none
}

BOOST_AUTO_TEST_CASE(a_named_device_and_fp32_pass_as_they_are) {
  launch_node_flags named({.metrics = "off", .device = "cuda:3"});
  BOOST_TEST(value_of(named.of("worker-0", "alpha", "/job"), "--device") == "cuda:3");
  BOOST_TEST(value_of(named.of("worker-1", "alpha", "/job"), "--device") == "cuda:3");
  launch_node_flags cpu({.metrics = "off"});
  const auto f = cpu.of("worker-0", "alpha", "/job");
  BOOST_TEST(!has(f, "--device"));
  BOOST_TEST(!has(f, "--precision"));
  BOOST_TEST(!has(f, "--tf32"));
}
