// `troupe launch --local --mode allreduce` end to end: 3 replicas with no shard servers
// dial each other over mutual TLS and learn; their ring pieces through shared memory or on
// bulk lanes give the bits of the same job's in the messages; a replica killed mid-ring
// ends the job naming it, well inside the timeouts.
#define BOOST_TEST_MODULE launch_ring
#include <signal.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/background.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

// A 3-replica allreduce job whose replica 1 is killed in its second epoch.
void killed_mid_ring(bool lanes) {
  temp_dir dir("launch-ring-kill");
  std::vector<std::string> args{troupe_bin(), "launch",
                                "--local",    "--workers",
                                "3",          "--mode",
                                "allreduce",  "--epochs",
                                "50",         "--train-samples",
                                "20000",      "--metrics",
                                "off",        "--request-timeout",
                                "600",        "--stall-timeout",
                                "600"};
  if (lanes) args.push_back("--no-shared-memory");
  background_process launch(args, dir.file("launch"));
  BOOST_REQUIRE(launch.started());
  BOOST_REQUIRE_MESSAGE(launch.wait_for_err("epoch 1/50", 120s), launch.err());
  const pid_t victim = child_with(launch.pid(), "--worker-index 1");
  BOOST_REQUIRE(victim > 0);
  const auto killed = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  const auto code = launch.wait(90s);
  BOOST_REQUIRE_MESSAGE(code.has_value(), "launch still waits after a replica died: " << launch.err());
  const auto took = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - killed);
  BOOST_TEST(took.count() < 60);  // far inside the 600 s timeouts
  BOOST_TEST(*code != 0);
  BOOST_TEST(launch.err().find("worker 1 is gone") != std::string::npos, launch.err());
  BOOST_TEST(launch.err().find("stage_lost") != std::string::npos, launch.err());
}

}  // namespace

// Note [Ring connections]: the replicas dial each other over mutual TLS.
BOOST_AUTO_TEST_CASE(allreduce_learns_with_a_process_per_replica_and_no_shard_servers) {
  auto r = run_process({troupe_bin(), "launch", "--local", "--workers", "3", "--mode", "allreduce", "--train-samples",
                        "10000", "--epochs", "3", "--metrics", "off"},
                       300s);
  BOOST_REQUIRE(!r.timed_out);
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["mode"].get<std::string>() == "allreduce");
  BOOST_TEST(j["servers"].get<int>() == 0);
  BOOST_TEST(j["test_accuracy"].get<double>() >= 0.80);
  BOOST_TEST(r.err.find("launch: job") != std::string::npos);
  BOOST_TEST(r.err.find("[server") == std::string::npos);               // no shard server process
  BOOST_TEST(r.err.find("refused a ring hello") == std::string::npos);  // each came from a neighbour
}

// Note [Ring mailboxes] and Note [Ring lanes]: between processes of one host the ring's
// pieces go through shared memory; without it (as between hosts) on bulk lanes over mutual
// TLS; and the replicas end with the bits the same job gets with every piece in the
// messages (3 replicas, so pieces are passed on as well as started and ended).
BOOST_AUTO_TEST_CASE(ring_pieces_through_shared_memory_or_lanes_give_the_bits_of_the_messages) {
  struct way {
    std::vector<std::string> flags;
    std::size_t mailboxes, lanes;  // replicas that say their pieces go that way
  };
  auto run = [](const way& w) {
    std::vector<std::string> args{troupe_bin(), "launch",          "--local", "--workers", "3", "--mode",
                                  "allreduce",  "--train-samples", "3000",    "--epochs",  "1", "--metrics",
                                  "off"};
    args.insert(args.end(), w.flags.begin(), w.flags.end());
    auto r = run_process(args, 300s);
    BOOST_REQUIRE(!r.timed_out);
    BOOST_TEST_INFO("stderr: " << r.err);
    BOOST_REQUIRE(r.exit_code == 0);
    auto count = [&](const std::string& line) {
      std::size_t n = 0;
      for (auto at = r.err.find(line); at != std::string::npos; at = r.err.find(line, at + 1)) ++n;
      return n;
    };
    BOOST_TEST(count("passes its ring pieces to") == w.mailboxes);  // logged once a next replica accepted one
    BOOST_TEST(count("sends its ring pieces to") == w.lanes);       // logged once the lane to it opened
    return nlohmann::json::parse(r.out)["params_fnv1a"].get<std::string>();
  };
  const std::string shared = run({{}, 3, 0});
  const std::string lanes = run({{"--no-shared-memory"}, 0, 3});
  const std::string messages = run({{"--no-shared-memory", "--no-bulk-lanes"}, 0, 0});
  BOOST_TEST(shared == messages);
  BOOST_TEST(lanes == messages);
}

// Note [Ring all-reduce of gradients]: a replica killed mid-ring ends the job, naming it,
// within the failure detection of its neighbours (its connections drop), not at a timeout.
// So it does when the pieces go on bulk lanes (Note [Ring lanes]), as between hosts.
BOOST_AUTO_TEST_CASE(a_replica_killed_mid_ring_ends_the_job_naming_it) {
  for (const bool lanes : {false, true}) {
    BOOST_TEST_CONTEXT((lanes ? "bulk lanes" : "shared memory")) { killed_mid_ring(lanes); }
  }
}
