// A launched job that keeps checkpoints and loses a node, end to end (tools/
// launch_restarts.cpp): a lost shard server is started again alone and the job restarts in
// place, a lost coordinator is started again alone and its nodes join it again, and with
// --on-shard-loss fail the whole job starts again; an allreduce job that loses a replica
// starts again; each from its newest checkpoint, ending bitwise as the run that lost
// nothing. An elastic allreduce job (--min-workers) goes on with the survivors of a lost
// worker and stops when too few are left.
#define BOOST_TEST_MODULE launch_recovery
#include <signal.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/background.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

// Waits (bounded) for `checkpoint` of the job in `dir` and a live node of `launch` whose
// command line holds `victim` (after a restart: the new one), and kills that node.
void kill_after(background_process& launch, const std::string& dir, const std::string& checkpoint,
                const std::string& victim) {
  const auto done = std::filesystem::path(dir) / checkpoint / "MANIFEST.tf";
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  pid_t node = 0;
  while (std::chrono::steady_clock::now() < deadline &&
         (!std::filesystem::exists(done) || (node = child_with(launch.pid(), victim)) <= 0))
    std::this_thread::sleep_for(10ms);
  BOOST_REQUIRE_MESSAGE(node > 0, launch.err());
  ::kill(node, SIGKILL);
}

void kill_worker_1_after(background_process& launch, const std::string& dir, const char* checkpoint) {
  kill_after(launch, dir, checkpoint, "--worker-index 1");
}

}  // namespace

// Note [Restarting in place]: a shard server killed after the first checkpoint and again
// (its replacement) after checkpoint 60 is started again alone by launch, and the job
// restarts in place each time; a killed coordinator is started again alone with --resume,
// and the other nodes join it again (Note [Joining again]). Note [Restarting a job]:
// with --on-shard-loss fail, launch starts the whole job again from its newest
// checkpoint. Every way the sync job ends with the parameters of the run that lost
// nothing, saying how many steps its last restart repeated when the lost run could record
// it.
BOOST_AUTO_TEST_CASE(a_job_that_loses_a_node_goes_on_from_its_newest_checkpoint) {
  temp_dir dir("launch-restart");
  const auto job = [&](const std::string& name, std::vector<std::string> more = {}) {
    std::vector<std::string> a{troupe_bin(), "launch",           "--local",      "--mode",
                               "sync",       "--dataset",        "synthetic",    "--train-samples",
                               "6000",       "--batch-size",     "50",           "--epochs",
                               "3",          "--checkpoint-dir", dir.file(name), "--checkpoint-every",
                               "20",         "--slow-worker",    "0:3",          "--metrics",
                               "off"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const auto whole = run_process(job("whole"), 300s);
  BOOST_REQUIRE(!whole.timed_out);
  BOOST_REQUIRE_MESSAGE(whole.exit_code == 0, whole.err);
  const auto expected = nlohmann::json::parse(whole.out);
  BOOST_TEST(expected["restarts"] == 0);
  BOOST_TEST(expected["restarts_in_place"] == 0);
  enum class recovery { in_place, whole_job, coordinator_alone };
  struct loss {
    const char* name;
    const char* victim;
    std::vector<const char*> after;  // the checkpoints after which it is killed, in turn
    std::vector<std::string> flags;
    recovery how;
  };
  for (const loss& l :
       {loss{"server", "--role server", {"ckpt-000000000020", "ckpt-000000000060"}, {}, recovery::in_place},
        loss{"server-fail", "--role server", {"ckpt-000000000020"}, {"--on-shard-loss", "fail"}, recovery::whole_job},
        loss{"coordinator", "--role coordinator", {"ckpt-000000000020"}, {}, recovery::coordinator_alone}}) {
    BOOST_TEST_CONTEXT(l.name) {
      const std::string name = std::string("lost-") + l.name;
      background_process launch(job(name, l.flags), dir.file(name));
      BOOST_REQUIRE(launch.started());
      for (const char* step : l.after) kill_after(launch, dir.file(name), step, l.victim);
      const auto code = launch.wait(240s);
      BOOST_REQUIRE_MESSAGE(code.has_value(), launch.err());
      BOOST_REQUIRE_MESSAGE(*code == 0, launch.err());
      const auto r = nlohmann::json::parse(launch.out());
      const std::size_t losses = l.after.size();
      std::size_t respawned = 0;
      for (const auto& [who, times] : r["respawned"].items()) respawned += times.get<std::size_t>();
      BOOST_TEST(r["restarts"] == (l.how == recovery::whole_job ? losses : 0u));
      BOOST_TEST(r["restarts_in_place"] == (l.how == recovery::in_place ? losses : 0u));
      BOOST_TEST(respawned == (l.how == recovery::whole_job ? 0u : losses), r.dump());
      if (l.how == recovery::in_place)
        BOOST_TEST(launch.err().find("restarts in place") != std::string::npos, launch.err());
      if (l.how == recovery::coordinator_alone) {
        BOOST_TEST(r["respawned"]["coordinator"] == 1, r.dump());
        BOOST_TEST(launch.err().find("waiting up to 60 s for it to come back") != std::string::npos, launch.err());
      }
      if (l.how == recovery::whole_job)
        BOOST_TEST(launch.err().find("restart " + std::to_string(losses) + " of at most 3") != std::string::npos,
                   launch.err());
      BOOST_TEST(r["resumed_from_step"].get<int>() >= (losses == 2 ? 60 : 20));
      // Note [Steps replayed]: the coordinator that lost its shard recorded how far the job
      // had got; a coordinator killed outright could not.
      if (std::string(l.victim) == "--role server")
        BOOST_TEST((r["steps_replayed"].is_number_integer() && r["steps_replayed"].get<int>() >= 0), r.dump());
      else
        BOOST_TEST(r["steps_replayed"].is_null(), r.dump());
      BOOST_TEST(r["params_fnv1a"] == expected["params_fnv1a"]);
    }
  }
}

// Note [Members' checkpoints]: an allreduce job with checkpoints that loses a replica
// (killed after checkpoint 20) is started again by launch from its newest checkpoint, and
// ends with the parameters of the run that lost nothing.
BOOST_AUTO_TEST_CASE(an_allreduce_job_that_loses_a_replica_goes_on_from_its_newest_checkpoint) {
  temp_dir dir("launch-ring-restart");
  const auto job = [&](const std::string& name) {
    return std::vector<std::string>{
        troupe_bin(), "launch",        "--local",   "--mode",           "allreduce",    "--workers",
        "3",          "--dataset",     "synthetic", "--train-samples",  "6000",         "--batch-size",
        "50",         "--epochs",      "3",         "--checkpoint-dir", dir.file(name), "--checkpoint-every",
        "10",         "--slow-worker", "0:3",       "--metrics",        "off"};
  };
  const auto whole = run_process(job("whole"), 300s);
  BOOST_REQUIRE(!whole.timed_out);
  BOOST_REQUIRE_MESSAGE(whole.exit_code == 0, whole.err);
  const auto expected = nlohmann::json::parse(whole.out);
  background_process launch(job("lost"), dir.file("lost"));
  BOOST_REQUIRE(launch.started());
  kill_worker_1_after(launch, dir.file("lost"), "ckpt-000000000010");
  const auto code = launch.wait(240s);
  BOOST_REQUIRE_MESSAGE(code.has_value(), launch.err());
  BOOST_REQUIRE_MESSAGE(*code == 0, launch.err());
  const auto r = nlohmann::json::parse(launch.out());
  BOOST_TEST(r["restarts"] == 1);
  BOOST_TEST(r["resumed_from_step"].get<int>() >= 10);
  BOOST_TEST(r["params_fnv1a"] == expected["params_fnv1a"]);
}

// Note [Leaving out lost workers]: an elastic allreduce job of 3 workers (--min-workers 2)
// whose worker 1 is killed after checkpoint 10 re-forms its ring from the 2 survivors,
// rolled back to that checkpoint, trains every sample it still planned and learns. Losing
// one more leaves 1, fewer than 2: the job stops, saying so, with a lost node's exit code.
BOOST_AUTO_TEST_CASE(an_elastic_allreduce_job_goes_on_with_its_survivors) {
  temp_dir dir("launch-elastic");
  const auto job = [&](const std::string& name) {
    return std::vector<std::string>{troupe_bin(),
                                    "launch",
                                    "--local",
                                    "--mode",
                                    "allreduce",
                                    "--workers",
                                    "3",
                                    "--min-workers",
                                    "2",
                                    "--dataset",
                                    "synthetic",
                                    "--train-samples",
                                    "6000",
                                    "--batch-size",
                                    "50",
                                    "--epochs",
                                    "3",
                                    "--checkpoint-dir",
                                    dir.file(name),
                                    "--checkpoint-every",
                                    "10",
                                    "--slow-worker",
                                    "0:3",
                                    "--metrics",
                                    "off"};
  };
  {
    background_process launch(job("once"), dir.file("once"));
    BOOST_REQUIRE(launch.started());
    kill_worker_1_after(launch, dir.file("once"), "ckpt-000000000010");
    const auto code = launch.wait(240s);
    BOOST_REQUIRE_MESSAGE(code.has_value(), launch.err());
    BOOST_REQUIRE_MESSAGE(*code == 0, launch.err());
    const auto r = nlohmann::json::parse(launch.out());
    BOOST_TEST(r["workers"] == 2);
    BOOST_TEST(r["restarts"] == 1);
    BOOST_TEST(r["workers_left_out"] == nlohmann::json::array({"worker 1"}));
    BOOST_TEST(r["resumed_from_step"].get<int>() >= 10);
    BOOST_TEST(r["samples_trained"] == r["samples_planned"]);
    BOOST_TEST(r["test_accuracy"].get<double>() >= 0.85);
    BOOST_TEST(launch.err().find("worker 1 lost for good: the ring re-forms from the 2 surviving replicas") !=
                   std::string::npos,
               launch.err());
  }
  {
    background_process launch(job("twice"), dir.file("twice"));
    BOOST_REQUIRE(launch.started());
    kill_worker_1_after(launch, dir.file("twice"), "ckpt-000000000010");
    BOOST_REQUIRE_MESSAGE(launch.wait_for_err("restart 1 of at most", 120s), launch.err());
    kill_worker_1_after(launch, dir.file("twice"), "ckpt-000000000060");  // worker 2 of the first start
    const auto code = launch.wait(240s);
    BOOST_REQUIRE_MESSAGE(code.has_value(), launch.err());
    BOOST_TEST(*code == 3);
    BOOST_TEST(launch.err().find("fewer than --min-workers 2; the job stops") != std::string::npos, launch.err());
  }
}
