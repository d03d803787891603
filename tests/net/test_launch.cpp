// `troupe launch --local` end to end: 2 shard servers and 2 workers as separate
// processes, mutual TLS on loopback, learn a 10k-sample Fashion-MNIST subset to >= 80% in
// each mode, and so do 3 replicas of allreduce with no shard servers, whose ring pieces
// through shared memory or on bulk lanes give the bits of the same job's in the messages,
// and where a killed replica ends the job naming it; a failing job makes launch fail; a hung coordinator does
// not hold the launch; a job that keeps checkpoints and loses its shard server restarts
// in place with that server started again alone, one that loses its coordinator starts
// it again alone and its nodes join it again, and one that loses a server with
// --on-shard-loss fail is started again whole, each from its newest checkpoint and
// ending bitwise as it would have; an elastic allreduce job (--min-workers) goes on with the survivors of a lost
// worker and stops when too few are left; a bad flag is a usage error.
#define BOOST_TEST_MODULE launch
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "tests/support/background.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

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
      // ... and the rank the coordinator assigned: launch's worker k asks for rank k.
      for (const char* k : {"0", "1"}) {
        const std::string label = std::string("[worker ") + k + "] ";
        BOOST_TEST(r.err.find(label + "troupe: info: worker " + k + " (") != std::string::npos, label);
      }
      BOOST_TEST(r.err.find("[worker 0] troupe: info: worker 1") == std::string::npos);
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
  BOOST_TEST(r.err.find("[server") == std::string::npos);  // no shard server process
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
    std::vector<std::string> args{troupe_bin(), "launch",          "--local",  "--workers", "3",     "--mode",
                                  "allreduce",  "--train-samples", "3000",     "--epochs",  "1",     "--metrics",
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
    BOOST_TEST(count("sends its ring pieces to") == w.lanes);  // logged once the lane to it opened
    return nlohmann::json::parse(r.out)["params_fnv1a"].get<std::string>();
  };
  const std::string shared = run({{}, 3, 0});
  const std::string lanes = run({{"--no-shared-memory"}, 0, 3});
  const std::string messages = run({{"--no-shared-memory", "--no-bulk-lanes"}, 0, 0});
  BOOST_TEST(shared == messages);
  BOOST_TEST(lanes == messages);
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
  auto not_elastic = run_process({troupe_bin(), "launch", "--local", "--min-workers", "2"}, 30s);
  BOOST_TEST(not_elastic.exit_code == 2);
  BOOST_TEST(not_elastic.err.find("--mode allreduce") != std::string::npos, not_elastic.err);
  auto neither = run_process({troupe_bin(), "launch"}, 30s);
  BOOST_TEST(neither.exit_code == 2);
  BOOST_TEST(neither.err.find("--local") != std::string::npos);
}

namespace {

// The pid of the live process whose parent is `parent` and whose command line holds `word`.
pid_t child_with(pid_t parent, const std::string& word) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = all.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(all.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    if (!(rest >> state >> ppid) || ppid != parent) continue;
    std::ifstream cmd(e.path() / "cmdline");
    std::string line((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    std::replace(line.begin(), line.end(), '\0', ' ');
    if (line.find(word) != std::string::npos) return std::stoi(pid);
  }
  return 0;
}

// A 3-replica allreduce job whose replica 1 is killed in its second epoch.
void killed_mid_ring(bool lanes) {
  temp_dir dir("launch-ring-kill");
  std::vector<std::string> args{troupe_bin(), "launch", "--local", "--workers", "3", "--mode", "allreduce",
                                "--epochs", "50", "--train-samples", "20000", "--metrics", "off",
                                "--request-timeout", "600", "--stall-timeout", "600"};
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

// Note [Ring all-reduce of gradients]: a replica killed mid-ring ends the job, naming it,
// within the failure detection of its neighbours (its connections drop), not at a timeout.
// So it does when the pieces go on bulk lanes (Note [Ring lanes]), as between hosts.
BOOST_AUTO_TEST_CASE(a_replica_killed_mid_ring_ends_the_job_naming_it) {
  for (const bool lanes : {false, true}) {
    BOOST_TEST_CONTEXT((lanes ? "bulk lanes" : "shared memory")) { killed_mid_ring(lanes); }
  }
}

// A coordinator that hangs (here: stopped) no longer holds launch forever: its nodes leave
// when their heartbeats go unanswered, and launch then stops it and fails, saying so.
BOOST_AUTO_TEST_CASE(a_hung_coordinator_does_not_hold_the_launch) {
  temp_dir dir("launch-hung");
  background_process launch({troupe_bin(), "launch", "--local", "--epochs", "30", "--simulate-compute", "20",
                             "--train-samples", "20000", "--batch-size", "64", "--metrics", "off"},
                            dir.file("launch"));
  BOOST_REQUIRE(launch.started());
  BOOST_REQUIRE_MESSAGE(launch.wait_for_err("epoch 1/30", 120s), launch.err());
  const pid_t coordinator = child_with(launch.pid(), "--role coordinator");
  BOOST_REQUIRE(coordinator > 0);
  ::kill(coordinator, SIGSTOP);
  const auto code = launch.wait(90s);  // heartbeat timeout 5 s, then launch's grace of 15 s and 5 more
  BOOST_REQUIRE_MESSAGE(code.has_value(), "launch still waits for its stopped coordinator: " << launch.err());
  BOOST_TEST(*code == 1);
  BOOST_TEST(launch.err().find("the coordinator did not end after the job's other processes had") != std::string::npos,
             launch.err());
}

// Over ssh, each host's copy of the job directory (its nodes' keys) is removed however
// the job ends; here its nodes cannot even start (the remote troupe does not exist).
// ssh and scp are stand-ins that run their commands on this machine.
BOOST_AUTO_TEST_CASE(remote_job_directories_are_removed_when_the_job_ends) {
  temp_dir dir("launch-ssh");
  std::filesystem::create_directories(dir.path / "bin");
  const std::string log = dir.file("commands.log");
  std::ofstream(dir.file("bin/ssh")) << "#!/bin/sh\n"
                                     << "while [ $# -gt 0 ]; do case \"$1\" in -o) shift 2;; -*) shift;; *) break;; esac; done\n"
                                     << "shift\n"  // the host
                                     << "echo \"ssh $*\" >> " << log << "\n"
                                     << "exec sh -c \"$*\"\n";
  std::ofstream(dir.file("bin/scp")) << "#!/bin/sh\n"
                                     << "files=\"\"; dest=\"\"\n"
                                     << "while [ $# -gt 0 ]; do case \"$1\" in -o) shift 2;; -*) shift;; "
                                        "*:*) dest=${1#*:}; shift;; *) files=\"$files $1\"; shift;; esac; done\n"
                                     << "echo \"scp$files -> $dest\" >> " << log << "\n"
                                     << "cp -p $files \"$dest\"\n";
  for (const char* f : {"bin/ssh", "bin/scp"}) std::filesystem::permissions(dir.path / f, std::filesystem::perms::owner_all);
  std::ofstream(dir.file("hosts")) << "localhost slots=1\n";
  const std::string remote = dir.file("remote");
  const std::string path = dir.file("bin") + ":" + std::getenv("PATH");
  ::setenv("PATH", path.c_str(), 1);  // launch runs `scp` from the PATH
  auto r = run_process({troupe_bin(), "launch", "--hostfile", dir.file("hosts"), "--remote-dir", remote, "--troupe",
                        "/nonexistent/troupe", "--ssh", dir.file("bin/ssh"), "--servers", "1", "--metrics", "off",
                        "--job-dir", dir.file("job")},
                       120s);
  BOOST_REQUIRE(!r.timed_out);
  std::ifstream in(log);
  const std::string commands((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BOOST_TEST_INFO("stderr: " << r.err << "\ncommands: " << commands);
  BOOST_TEST(r.exit_code != 0);  // the nodes could not start
  BOOST_TEST(commands.find("scp") != std::string::npos);               // the keys were copied there
  BOOST_TEST(commands.find("worker-0.pem") != std::string::npos);
  BOOST_TEST(commands.find("ssh rm -rf " + remote) != std::string::npos);  // and removed at the end
  BOOST_TEST(!std::filesystem::exists(remote));
  BOOST_TEST(!std::filesystem::exists(dir.file("job")));
}

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
    std::vector<std::string> a{troupe_bin(), "launch", "--local", "--mode", "sync", "--dataset", "synthetic",
                               "--train-samples", "6000", "--batch-size", "50", "--epochs", "3",
                               "--checkpoint-dir", dir.file(name), "--checkpoint-every", "20",
                               "--slow-worker", "0:3", "--metrics", "off"};
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
      for (const char* step : l.after) {
        const auto done = std::filesystem::path(dir.file(name)) / step / "MANIFEST.tf";
        const auto deadline = std::chrono::steady_clock::now() + 120s;
        pid_t node = 0;
        // The checkpoint, and a live node to kill (after a restart: the new one).
        while (std::chrono::steady_clock::now() < deadline &&
               (!std::filesystem::exists(done) || (node = child_with(launch.pid(), l.victim)) <= 0))
          std::this_thread::sleep_for(10ms);
        BOOST_REQUIRE_MESSAGE(node > 0, launch.err());
        ::kill(node, SIGKILL);
      }
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

namespace {

// Waits (bounded) for `checkpoint` of the job in `dir` and a live worker 1 of `launch`,
// and kills that worker.
void kill_worker_1_after(background_process& launch, const std::string& dir, const char* checkpoint) {
  const auto done = std::filesystem::path(dir) / checkpoint / "MANIFEST.tf";
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  pid_t worker = 0;
  while (std::chrono::steady_clock::now() < deadline &&
         (!std::filesystem::exists(done) || (worker = child_with(launch.pid(), "--worker-index 1")) <= 0))
    std::this_thread::sleep_for(10ms);
  BOOST_REQUIRE_MESSAGE(worker > 0, launch.err());
  ::kill(worker, SIGKILL);
}

}  // namespace

// Note [Members' checkpoints]: an allreduce job with checkpoints that loses a replica
// (killed after checkpoint 20) is started again by launch from its newest checkpoint, and
// ends with the parameters of the run that lost nothing.
BOOST_AUTO_TEST_CASE(an_allreduce_job_that_loses_a_replica_goes_on_from_its_newest_checkpoint) {
  temp_dir dir("launch-ring-restart");
  const auto job = [&](const std::string& name) {
    return std::vector<std::string>{troupe_bin(), "launch", "--local", "--mode", "allreduce", "--workers", "3",
                                    "--dataset", "synthetic", "--train-samples", "6000", "--batch-size", "50",
                                    "--epochs", "3", "--checkpoint-dir", dir.file(name), "--checkpoint-every", "10",
                                    "--slow-worker", "0:3", "--metrics", "off"};
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
    return std::vector<std::string>{troupe_bin(), "launch", "--local", "--mode", "allreduce", "--workers", "3",
                                    "--min-workers", "2", "--dataset", "synthetic", "--train-samples", "6000",
                                    "--batch-size", "50", "--epochs", "3", "--checkpoint-dir", dir.file(name),
                                    "--checkpoint-every", "10", "--slow-worker", "0:3", "--metrics", "off"};
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
