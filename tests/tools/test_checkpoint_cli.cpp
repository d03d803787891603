// Tests for tools/checkpoint_cli.cpp through the troupe binary: `train --resume` goes on
// from the newest good checkpoint under the checkpoints' job id and ends bitwise as the
// uninterrupted run, also after the process was killed outright (with a --checkpoint-queue
// deep enough that a loaded machine's slow disk skips none of the counted checkpoints); so does `launch --local
// --resume` (separate processes, mutual TLS);
// so does an allreduce job, whose replicas write the checkpoints;
// a damaged newest checkpoint is passed over with a warning; a lost run's record says how
// many steps the resumed run repeats, and a stalled job writes one (Note [Steps
// replayed]); an empty directory, another
// job's id, another model, a fresh job given a directory that holds checkpoints, and a
// checkpoint at the job's end are refused with a message that says what to do.
#define BOOST_TEST_MODULE checkpoint_cli
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/background.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// A sync job on 3000 synthetic samples, 2 workers of 50: 30 steps per epoch, 2 epochs.
std::vector<std::string> job(const std::string& command, std::vector<std::string> more, const char* epochs = "2") {
  std::vector<std::string> a{troupe_bin(), command, "--mode", "sync", "--dataset", "synthetic", "--train-samples",
                             "3000", "--batch-size", "50", "--epochs", epochs, "--metrics", "off"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

process_result run(const std::vector<std::string>& argv, std::chrono::seconds timeout = 120s) {
  auto r = run_process(argv, timeout);
  BOOST_REQUIRE_MESSAGE(!r.timed_out, "troupe did not finish in time");
  return r;
}

nlohmann::json result_of(const process_result& r) {
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

// Removes every checkpoint after `step` from dir.
void keep_up_to(const fs::path& dir, int step) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("ckpt-") && std::stoi(e.path().filename().string().substr(5)) > step)
      fs::remove_all(e.path());
}

}  // namespace

BOOST_AUTO_TEST_CASE(train_resumes_bitwise_under_the_checkpoints_job_id) {
  temp_dir tmp("ckpt-cli-train");
  const std::string dir = tmp.file("ck");
  const auto whole = result_of(run(job("train", {"--checkpoint-dir", dir, "--checkpoint-every", "20",
                                                 "--keep-checkpoints", "10", "--checkpoint-queue", "16", "--job-id", "resumable"})));
  BOOST_TEST(whole["checkpoints_written"] == 4);  // 20, 30, 40, 60
  BOOST_TEST(whole["resumed_from_step"].is_null());
  BOOST_TEST(whole["steps_replayed"].is_null());
  keep_up_to(dir, 40);
  // Note [Steps replayed]: a lost run's record of how far it got, read once and removed.
  const fs::path record = fs::path(dir) / "lost.json";
  write_text(record, R"({"kind": "troupe-lost-node", "job_id": "resumable", "reached": 52,)"
                     R"( "why": "shard_lost: shard 0 died at step 52"})");
  auto r = run(job("train", {"--resume", dir, "--keep-checkpoints", "10"}));
  const auto resumed = result_of(r);
  BOOST_TEST(resumed["resumed_from_step"] == 40);
  BOOST_TEST(resumed["steps_replayed"] == 12);
  BOOST_TEST(!fs::exists(record));
  BOOST_TEST(resumed["params_fnv1a"] == whole["params_fnv1a"]);
  BOOST_TEST(resumed["samples_trained"] == 2 * 50 * 20);
  BOOST_TEST(has(r.err, "resuming job resumable from checkpoint 40"), r.err);
  BOOST_TEST(has(r.err, "it repeats 12 steps that the lost run had taken"), r.err);
  // A damaged record is warned about and removed; the resume goes on without the count.
  keep_up_to(dir, 40);
  write_text(record, "{\"kind\": \"troupe-lost");
  r = run(job("train", {"--resume", dir, "--keep-checkpoints", "10"}));
  BOOST_TEST(result_of(r)["steps_replayed"].is_null());
  BOOST_TEST(has(r.err, "lost.json: not a lost-node record; this run does not know how many steps it repeats"), r.err);
  BOOST_TEST(!fs::exists(record));
  // The newest is damaged: the one before it is taken, and the warning says why; the
  // steps from there to where the lost run got are repeated.
  keep_up_to(dir, 40);
  fs::resize_file(fs::path(dir) / "ckpt-000000000040" / "shard-0.tf", 64);
  write_text(record, R"({"kind": "troupe-lost-node", "job_id": "resumable", "reached": 52, "why": "shard_lost"})");
  r = run(job("train", {"--resume", dir}));
  BOOST_TEST(result_of(r)["resumed_from_step"] == 30);
  BOOST_TEST(result_of(r)["steps_replayed"] == 22);
  BOOST_TEST(has(r.err, "passed over checkpoint 40"), r.err);
  BOOST_TEST(has(r.err, "shard-0.tf"), r.err);
}

// The process killed outright (SIGKILL, perhaps in the middle of writing a file) after
// its first checkpoint; the resumed run leaves no temporary behind and ends bitwise as
// the run that was never killed.
BOOST_AUTO_TEST_CASE(a_killed_train_resumes_bitwise) {
  temp_dir tmp("ckpt-cli-killed");
  const std::string dir = tmp.file("ck");
  const auto whole = result_of(run(job("train", {})));
  background_process killed(job("train", {"--checkpoint-dir", dir, "--checkpoint-every", "10", "--slow-worker", "0:5"}),
                            tmp.file("killed"));
  BOOST_REQUIRE(killed.started());
  const auto first = fs::path(dir) / "ckpt-000000000010" / "MANIFEST.tf";
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!fs::exists(first) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  BOOST_REQUIRE_MESSAGE(fs::exists(first), killed.err());
  ::kill(killed.pid(), SIGKILL);
  BOOST_REQUIRE(killed.wait(30s).has_value());
  const auto resumed = result_of(run(job("train", {"--resume", dir, "--checkpoint-every", "10"})));
  BOOST_TEST(resumed["resumed_from_step"].get<int>() >= 10);
  BOOST_TEST(resumed["steps_replayed"].is_null());  // the process that knew how far it got was killed
  BOOST_TEST(resumed["params_fnv1a"] == whole["params_fnv1a"]);
  for (const auto& e : fs::recursive_directory_iterator(dir))
    BOOST_TEST(e.path().filename().string().find(".tmp-") == std::string::npos, e.path());
}

BOOST_AUTO_TEST_CASE(launch_resumes_bitwise_across_processes) {
  temp_dir tmp("ckpt-cli-launch");
  const std::string dir = tmp.file("ck");
  const auto whole = result_of(run(
      job("launch", {"--local", "--checkpoint-dir", dir, "--checkpoint-every", "20", "--keep-checkpoints", "10",
                     "--checkpoint-queue", "16"}),
      300s));
  BOOST_TEST(whole["checkpoints_written"] == 4);
  keep_up_to(dir, 30);
  const auto resumed = result_of(run(job("launch", {"--local", "--resume", dir}), 300s));
  BOOST_TEST(resumed["resumed_from_step"] == 30);
  BOOST_TEST(resumed["params_fnv1a"] == whole["params_fnv1a"]);
}

// Note [Members' checkpoints]: in --mode allreduce the replicas hold the parameters, and
// replica 0's stages write them, one file per stage; the job resumes bitwise, whole and
// cut into two pipeline stages. A checkpoint whose stage file is damaged is passed over.
BOOST_AUTO_TEST_CASE(an_allreduce_job_resumes_bitwise_from_its_replicas_checkpoints) {
  for (const char* stages : {"1", "2"}) {
    BOOST_TEST_CONTEXT("--pipeline-stages " << stages) {
      temp_dir tmp("ckpt-cli-ring");
      const std::string dir = tmp.file("ck");
      const auto ring_job = [&](std::vector<std::string> more) {
        std::vector<std::string> a{troupe_bin(), "train", "--mode", "allreduce", "--workers", "2",
                                   "--pipeline-stages", stages, "--dataset", "synthetic", "--train-samples", "3000",
                                   "--batch-size", "50", "--epochs", "2", "--metrics", "off", "--keep-checkpoints", "10",
                                   "--checkpoint-queue", "16"};
        a.insert(a.end(), more.begin(), more.end());
        return a;
      };
      const auto whole = result_of(run(ring_job({"--checkpoint-dir", dir, "--checkpoint-every", "20"})));
      BOOST_TEST(whole["checkpoints_written"] == 4);  // 20, 30, 40, 60
      const fs::path forty = fs::path(dir) / "ckpt-000000000040";
      BOOST_TEST(fs::exists(forty / "stage-0.tf"));
      BOOST_TEST(fs::exists(forty / "stage-1.tf") == (std::string(stages) == "2"));
      keep_up_to(dir, 40);
      auto r = run(ring_job({"--resume", dir}));
      const auto resumed = result_of(r);
      BOOST_TEST(resumed["resumed_from_step"] == 40);
      BOOST_TEST(resumed["params_fnv1a"] == whole["params_fnv1a"]);
      keep_up_to(dir, 40);
      fs::resize_file(forty / "stage-0.tf", 64);
      r = run(ring_job({"--resume", dir}));
      BOOST_TEST(result_of(r)["resumed_from_step"] == 30);
      BOOST_TEST(has(r.err, "stage-0.tf"), r.err);
    }
  }
}

// Note [Steps replayed]: an in-process job that stalls (worker 0 far slower than the 1 s
// stall timeout) writes the record into its checkpoint directory; before that directory
// exists it writes nothing and says nothing of it; a record it cannot write is warned
// about by name.
BOOST_AUTO_TEST_CASE(a_stalled_job_records_how_far_it_got) {
  temp_dir tmp("ckpt-cli-stalled");
  const auto stalled = [&](const std::string& dir) {
    auto r = run(job("train", {"--checkpoint-dir", dir, "--slow-worker", "0:3000", "--stall-timeout", "1"}));
    BOOST_TEST(r.exit_code != 0);
    BOOST_TEST(has(r.err, "stalled: no progress for 1 s"), r.err);
    return r;
  };
  const fs::path fresh = tmp.file("fresh");  // no checkpoint yet: nothing to resume
  auto r = stalled(fresh.string());
  BOOST_TEST(!fs::exists(fresh / "lost.json"));
  BOOST_TEST(!has(r.err, "lost.json"), r.err);
  BOOST_TEST(!has(r.err, "will not know"), r.err);

  const fs::path kept = tmp.file("kept");
  fs::create_directories(kept);
  stalled(kept.string());
  std::ifstream in(kept / "lost.json");
  BOOST_REQUIRE(in.good());
  const auto record = nlohmann::json::parse(in);
  BOOST_TEST(record["kind"] == "troupe-lost-node");
  BOOST_TEST(record["reached"].get<int>() >= 0);
  BOOST_TEST(has(record["why"].get<std::string>(), "stalled"));

  const fs::path blocked = tmp.file("blocked");
  fs::create_directories(blocked / "lost.json");  // a directory where the record goes
  r = stalled(blocked.string());
  BOOST_TEST(has(r.err, "lost.json"), r.err);
  BOOST_TEST(has(r.err, "will not know how many steps it repeats"), r.err);
}

BOOST_AUTO_TEST_CASE(what_cannot_be_resumed_is_refused_saying_what_to_do) {
  temp_dir tmp("ckpt-cli-refused");
  const std::string dir = tmp.file("ck"), empty = tmp.file("empty");
  fs::create_directories(empty);
  auto r = run(job("train", {"--resume", empty}));
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(has(r.err, "no complete checkpoint"), r.err);
  result_of(run(job("train", {"--checkpoint-dir", dir, "--job-id", "first"})));
  r = run(job("train", {"--checkpoint-dir", dir}));  // a fresh job would mix with them
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(has(r.err, "already holds checkpoints"), r.err);
  BOOST_TEST(has(r.err, "--resume " + dir), r.err);
  r = run(job("train", {"--resume", dir, "--job-id", "second"}));
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(has(r.err, "continues job 'first'"), r.err);
  r = run(job("train", {"--resume", dir, "--model", "cnn"}));
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(has(r.err, "'cnn'"), r.err);
  r = run(job("train", {"--resume", dir}));  // its last checkpoint ends its 2 epochs
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(has(r.err, "raise --epochs"), r.err);
  r = run(job("train", {"--resume", dir}, "3"));
  BOOST_TEST(result_of(r)["resumed_from_step"] == 60);
  r = run(job("train", {"--checkpoint-dir", dir, "--keep-checkpoints", "0"}));
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(has(r.err, "--keep-checkpoints"), r.err);
  r = run(job("train", {"--on-shard-loss", "sometimes"}));  // Note [Restarting in place]
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(has(r.err, "use auto, fail or recover"), r.err);
  r = run(job("train", {"--on-shard-loss", "recover"}));
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(has(r.err, "give --checkpoint-dir DIR"), r.err);
  r = run(job("train", {"--on-shard-loss", "recover", "--checkpoint-dir", tmp.file("one-process")}));
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(has(r.err, "use troupe launch"), r.err);
}
