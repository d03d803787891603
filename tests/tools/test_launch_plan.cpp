// Tests for tools/launch_plan.cpp: host files, the local and ssh plans (roles, ports,
// TLS flags, job.toml, the copy steps), a launched script's environment, and shell quoting
// for --dry-run.
#define BOOST_TEST_MODULE launch_plan
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "tools/launch_plan.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

bool has(const std::vector<std::string>& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

// A job of 2 servers and 3 workers in d, with the `troupe` on PATH, its coordinator on port.
launch_request request(const test::temp_dir& d, const std::string& job_id, std::uint16_t port) {
  launch_request req;
  req.servers = 2;
  req.workers = 3;
  req.troupe_bin = "troupe";
  req.job_id = job_id;
  req.job_dir = d.path.string();
  req.port = port;
  return req;
}

}  // namespace

BOOST_AUTO_TEST_CASE(hostfiles) {
  test::temp_dir d{"plan"};
  fs::create_directories(d.path);
  const auto good = (d.path / "hosts").string();
  std::ofstream(good) << "# the cluster\nnode-a slots=2\n\nnode-b   # one slot\n";
  auto h = parse_hostfile(good);
  BOOST_REQUIRE(h.has_value());
  BOOST_REQUIRE(h->size() == 2u);
  BOOST_TEST((*h)[0].slots == 2u);
  BOOST_TEST((*h)[1].host == "node-b");
  const auto bad = (d.path / "bad").string();
  std::ofstream(bad) << "node-a gpus=2\n";
  BOOST_TEST(parse_hostfile(bad).error().message.find(":1:") != std::string::npos);
  BOOST_TEST(!parse_hostfile((d.path / "missing").string()).has_value());
}

BOOST_AUTO_TEST_CASE(local_plan_with_tls) {
  test::temp_dir d{"plan"};
  launch_request req = request(d, "job-x", 7123);
  req.troupe_bin = "/bin/troupe";
  req.job_toml = "epochs = \"1\"\n";
  auto plan = plan_local_launch(req);
  BOOST_REQUIRE(plan.has_value());
  BOOST_REQUIRE(plan->nodes.size() == 6u);
  BOOST_TEST(plan->nodes[0].name == "coordinator");
  BOOST_TEST(plan->nodes[0].collect_stdout);
  BOOST_TEST(has(plan->nodes[0].argv, "127.0.0.1:7123"));
  BOOST_TEST(has(plan->nodes[0].argv, (d.path / "job.toml").string()));
  for (const auto& n : plan->nodes) {
    BOOST_TEST(has(n.argv, "job-x"));
    BOOST_TEST(has(n.argv, "--tls-ca"));
    BOOST_TEST(!has(n.argv, "--insecure-network"));
  }
  BOOST_TEST(has(plan->nodes[5].argv, (d.path / "worker-2.pem").string()));
  // Each worker asks for its index as its rank, so "[worker k]" is the job's worker k.
  for (std::size_t k = 0; k < 3; ++k) {
    const auto& argv = plan->nodes[3 + k].argv;
    const auto at = std::find(argv.begin(), argv.end(), "--worker-index");
    BOOST_REQUIRE(at != argv.end());
    BOOST_TEST(*(at + 1) == std::to_string(k));
  }
  BOOST_TEST(fs::exists(d.path / "ca.pem"));
  BOOST_TEST(fs::exists(d.path / "server-1.pem"));
  BOOST_TEST(plan->setup.empty());
}

BOOST_AUTO_TEST_CASE(ssh_plan_places_roles_and_copies_files) {
  test::temp_dir d{"plan"};
  launch_request req = request(d, "job-y", 9000);
  req.hosts = {{"a", 2}, {"b", 1}};
  req.remote_dir = "/tmp/jy";
  auto plan = plan_ssh_launch(req);
  BOOST_REQUIRE(plan.has_value());
  BOOST_REQUIRE(plan->nodes.size() == 6u);
  BOOST_TEST(plan->nodes[0].name == "coordinator");
  BOOST_TEST(plan->nodes[0].argv.back().find("0.0.0.0:9000") != std::string::npos);
  BOOST_TEST(plan->nodes[2].argv.back().find("--advertise b") != std::string::npos);  // server 1 on host b
  BOOST_TEST(plan->nodes[2].argv.back().find("0.0.0.0:9002") != std::string::npos);
  BOOST_TEST(plan->nodes[5].argv.back().find("--worker-index 2") != std::string::npos);
  // A remote node stops when its ssh session's stdin, which launch holds, ends; its
  // session ends with 255 when its host goes away (Note [Leaving out lost workers]).
  for (const auto& n : plan->nodes) {
    BOOST_TEST(n.hold_stdin, n.name);
    BOOST_TEST(std::count(n.argv.begin(), n.argv.end(), "ServerAliveInterval=3") == 1, n.name);
    BOOST_TEST(n.argv.back().find("--stop-when-stdin-closes") != std::string::npos, n.name);
  }
  BOOST_TEST(plan->setup.size() == 4u);  // mkdir + scp for each of the two hosts
  BOOST_TEST(plan->setup[1].argv.front() == "scp");
  BOOST_TEST(plan->setup[1].argv.back() == "a:/tmp/jy/");
  // Each host's copy of the job directory (its nodes' keys) is removed at the end.
  BOOST_REQUIRE(plan->teardown.size() == 2u);
  BOOST_TEST(plan->teardown[0].argv[plan->teardown[0].argv.size() - 2] == "a");
  BOOST_TEST(plan->teardown[1].argv.back() == "rm -rf /tmp/jy");
}

BOOST_AUTO_TEST_CASE(insecure_plans_say_so) {
  test::temp_dir d{"plan"};
  launch_request req;
  req.tls = false;
  req.troupe_bin = "troupe";
  req.job_dir = d.path.string();
  auto plan = plan_local_launch(req);
  BOOST_REQUIRE(plan.has_value());
  for (const auto& n : plan->nodes) BOOST_TEST(has(n.argv, "--insecure-network"));
  BOOST_TEST(!fs::exists(d.path / "ca.pem"));
}

BOOST_AUTO_TEST_CASE(quoting) {
  BOOST_TEST(shell_quote({"a", "b c", "it's"}) == "a 'b c' 'it'\\''s'");
  BOOST_TEST(shell_quote({""}) == "''");
}

// A launched script gets what the nodes' flags say: no same-host fast path and no bulk
// lanes when the launch turns them off, and neither variable when it does not.
BOOST_AUTO_TEST_CASE(a_launched_script_follows_the_fast_path_and_lane_flags) {
  test::temp_dir d{"plan-env"};
  launch_request req = request(d, "job-env", 7070);
  auto env = [&] {
    std::map<std::string, std::string> m;
    for (auto& [k, v] : worker_environment(req, d.path.string(), "127.0.0.1:7070", 1)) m[k] = v;
    return m;
  };
  BOOST_TEST(!env().contains("TROUPE_SHARED_MEMORY"));
  BOOST_TEST(!env().contains("TROUPE_BULK_LANES"));
  BOOST_TEST(!env().contains("TROUPE_DOORBELLS"));
  req.shared_memory = false;
  req.bulk_lanes = false;
  req.doorbells = false;
  BOOST_TEST(env().at("TROUPE_SHARED_MEMORY") == "0");
  BOOST_TEST(env().at("TROUPE_BULK_LANES") == "0");
  BOOST_TEST(env().at("TROUPE_DOORBELLS") == "0");
  BOOST_TEST(env().at("TROUPE_WORKER_INDEX") == "1");
}

// Horovod's local and cross ranks: on one host every worker is local; over a host file
// the slots deal the workers, and a host counts in the cross ranks of the local ranks it has.
BOOST_AUTO_TEST_CASE(a_launched_script_knows_its_local_and_cross_ranks) {
  test::temp_dir d{"plan-locality"};
  launch_request req = request(d, "job-locality", 7070);
  std::map<std::string, std::string> env;
  for (auto& [k, v] : worker_environment(req, d.path.string(), "127.0.0.1:7070", 2)) env[k] = v;
  BOOST_TEST(env.at("TROUPE_LOCAL_RANK") == "2");
  BOOST_TEST(env.at("TROUPE_LOCAL_SIZE") == "3");
  BOOST_TEST(env.at("TROUPE_CROSS_RANK") == "0");
  BOOST_TEST(env.at("TROUPE_CROSS_SIZE") == "1");

  req.workers = 6;
  req.hosts = {{.host = "a", .slots = 2}, {.host = "b", .slots = 2}, {.host = "c", .slots = 1}};  // a a b b c, then a
  BOOST_TEST((worker_hosts(req) == std::vector<std::string>{"a", "a", "b", "b", "c", "a"}));
  const auto at = [&](std::uint32_t i) {
    const worker_locality w = locality_of(worker_hosts(req), i);
    return std::vector<std::uint32_t>{w.local_rank, w.local_size, w.cross_rank, w.cross_size};
  };
  BOOST_TEST((at(0) == std::vector<std::uint32_t>{0, 3, 0, 3}));  // local rank 0 on a, b and c
  BOOST_TEST((at(3) == std::vector<std::uint32_t>{1, 2, 1, 2}));  // local rank 1 on a and b
  BOOST_TEST((at(4) == std::vector<std::uint32_t>{0, 1, 2, 3}));
  BOOST_TEST((at(5) == std::vector<std::uint32_t>{2, 3, 0, 1}));  // only a has a third worker
}
