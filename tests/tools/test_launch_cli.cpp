// End-to-end tests of `troupe launch`'s plan (tools/cmd_launch.cpp, launch_plan): workers
// spread over a host's GPUs, the job handed to the coordinator as typed TOML, a host
// file's slots, and a job directory kept only when asked for (and never one the launcher
// did not make). Dry runs, except where a launch must fail before any node starts. Every
// run has a deadline.
#define BOOST_TEST_MODULE launch_cli
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/troupe_run.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

// `launch --device cuda` gives the k-th worker of a host cuda:k, and passes --tf32 on;
// the coordinator and the shard servers get no device.
BOOST_AUTO_TEST_CASE(launch_spreads_workers_over_the_gpus_of_a_host) {
  temp_dir dir("cli-launch");
  auto r = run_troupe({"launch", "--local", "--dry-run", "--workers", "3", "--servers", "1", "--device", "cuda",
                       "--tf32", "--metrics", "off", "--job-dir", dir.file("job")});
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string all = r.out + r.err;
  for (int k = 0; k < 3; ++k) BOOST_TEST(all.find("--device cuda:" + std::to_string(k) + " --tf32") != std::string::npos, all);
  BOOST_TEST(all.find("--device cuda:3") == std::string::npos);
  std::size_t devices = 0;
  for (std::size_t at = all.find("--device "); at != std::string::npos; at = all.find("--device ", at + 1)) ++devices;
  BOOST_TEST(devices == 3u);  // workers only
}

// `launch --precision bf16` passes the flag to every worker, and to no other node.
BOOST_AUTO_TEST_CASE(launch_passes_the_precision_to_the_workers) {
  temp_dir dir("cli-launch-precision");
  auto r = run_troupe({"launch", "--local", "--dry-run", "--workers", "2", "--servers", "1", "--precision", "bf16",
                       "--metrics", "off", "--job-dir", dir.file("job")});
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string all = r.out + r.err;
  std::size_t passed = 0;
  for (std::size_t at = all.find("--precision bf16"); at != std::string::npos; at = all.find("--precision bf16", at + 1))
    ++passed;
  BOOST_TEST(passed == 2u, all);
}

// launch hands the job to its coordinator in job.toml, numbers as numbers and flags as
// booleans, and the coordinator reads it with the same TOML reader.
BOOST_AUTO_TEST_CASE(launch_writes_the_job_as_typed_toml) {
  temp_dir dir("cli-job-toml");
  auto r = run_troupe({"launch", "--local", "--dry-run", "--keep-job-dir", "--epochs", "2", "--lr", "0.1",
                       "--no-nesterov", "--model", "mlp", "--job-dir", dir.file("job")});
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::ifstream in(dir.file("job/job.toml"));
  const std::string toml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* line : {"epochs = 2\n", "lr = 0.1\n", "nesterov = false\n", "model = \"mlp\"\n", "workers = 2\n",
                           "servers = 2\n"})
    BOOST_TEST(toml.find(line) != std::string::npos, line << " in " << toml);
}

// A host file's slots are the workers each host takes when --workers is not given, as in
// Horovod's and DeepSpeed's host files; a dry run shows the plan, with the removal of
// each host's job directory at the end.
BOOST_AUTO_TEST_CASE(host_file_slots_set_the_workers) {
  temp_dir dir("cli-slots");
  std::ofstream(dir.file("hosts")) << "# two hosts\nhost-a slots=2\nhost-b slots=3\n";
  auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::vector<std::string> base{"launch", "--hostfile", dir.file("hosts"), "--dry-run", "--metrics", "off"};
  auto r = run_troupe(base);
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(count(r.out, "--role worker") == 5u, r.out);
  BOOST_TEST(count(r.out, "host-b ") >= 3u);
  BOOST_TEST(count(r.out, "rm -rf") == 2u, r.out);  // one per host, after the job
  auto given = run_troupe(with(base, {"--workers", "2"}));
  BOOST_REQUIRE_MESSAGE(given.exit_code == 0, given.err);
  BOOST_TEST(count(given.out, "--role worker") == 2u);
  auto stages = run_troupe(with(base, {"--pipeline-stages", "2", "--microbatches", "2"}));
  BOOST_TEST(stages.exit_code == 2);
  BOOST_TEST(stages.err.find("5 slots") != std::string::npos, stages.err);
}

// The job directory holds the job's CA key: a dry run keeps it only when asked to (its
// commands name it), and a launch that fails before its job starts removes it.
BOOST_AUTO_TEST_CASE(launch_keeps_no_job_directory_it_was_not_asked_to) {
  temp_dir dir("cli-job-dir");
  const std::string job = dir.file("job");
  auto dry = run_troupe({"launch", "--local", "--dry-run", "--metrics", "off", "--job-dir", job});
  BOOST_REQUIRE_MESSAGE(dry.exit_code == 0, dry.err);
  BOOST_TEST(dry.out.find(job + "/ca.pem") != std::string::npos);
  BOOST_TEST(!std::filesystem::exists(job), dry.err);
  BOOST_TEST(dry.err.find("--keep-job-dir") != std::string::npos);
  // A dry run writes nothing at all: no job directory in TMPDIR, no Prometheus file.
  const std::string tmp = dir.file("tmp");
  std::filesystem::create_directories(tmp);
  auto quiet = run_process({troupe_bin(), "launch", "--local", "--dry-run", "--prometheus-config", dir.file("prom.yml")},
                           60s, {"TMPDIR=" + tmp});
  BOOST_REQUIRE_MESSAGE(quiet.exit_code == 0, quiet.err);
  BOOST_TEST(std::filesystem::is_empty(tmp), quiet.err);
  BOOST_TEST(!std::filesystem::exists(dir.file("prom.yml")));
  // A Prometheus file that cannot be written stops the launch before any node starts.
  auto unwritable = run_troupe({"launch", "--local", "--prometheus-config", "/nonexistent-dir/prom.yml"});
  BOOST_TEST(unwritable.exit_code == 2, unwritable.err);
  BOOST_TEST(unwritable.err.find("cannot write /nonexistent-dir/prom.yml") != std::string::npos, unwritable.err);
  BOOST_TEST(unwritable.out.find('{') == std::string::npos);  // no job ran
  // A job directory that holds something is not the launcher's to fill and remove.
  std::filesystem::create_directories(dir.file("mine"));
  std::ofstream(dir.file("mine/notes.txt")) << "keep me\n";
  auto taken = run_troupe({"launch", "--local", "--metrics", "off", "--job-dir", dir.file("mine")});
  BOOST_TEST(taken.exit_code == 2, taken.err);
  BOOST_TEST(taken.err.find("not empty") != std::string::npos, taken.err);
  BOOST_TEST(std::filesystem::exists(dir.file("mine/notes.txt")));
  auto kept = run_troupe({"launch", "--local", "--dry-run", "--metrics", "off", "--job-dir", job, "--keep-job-dir"});
  BOOST_REQUIRE_MESSAGE(kept.exit_code == 0, kept.err);
  BOOST_TEST(std::filesystem::exists(job + "/ca.key"));
  std::filesystem::remove_all(job);
  std::ofstream(dir.file("hosts")) << "nosuchhost.invalid slots=x\n";
  auto bad = run_troupe({"launch", "--hostfile", dir.file("hosts"), "--metrics", "off", "--job-dir", job});
  BOOST_TEST(bad.exit_code == 2, bad.err);
  BOOST_TEST(bad.err.find("slots") != std::string::npos, bad.err);
  BOOST_TEST(!std::filesystem::exists(job));
}
