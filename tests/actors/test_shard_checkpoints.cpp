// Whole jobs in one process with checkpoints (actors/shard_checkpoints.cpp and the
// coordinator's commits): every checkpoint step of a sync job is written and complete; a
// job resumed from one ends bitwise as the uninterrupted run, on the same or another
// number of shard servers, and with 2-bit pushes when the members' residuals come back
// too; --checkpoint-seconds adds checkpoints between the steps;
// async resumes and trains on; a checkpoint directory that cannot be written is counted
// and warned about while training goes on, or ends the job with --checkpoint-fatal; a
// full disk fails the checkpoints of a resumed job and leaves the one it resumed from
// loadable; a shard that cannot read the state it is told to resume from ends the job
// with a message naming it.
#define BOOST_TEST_MODULE shard_checkpoints
#include <boost/test/unit_test.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <fstream>

#include "core/job_checkpoint.hpp"
#include "core/residual_checkpoint.hpp"
#include "tests/support/jobs.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::test;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// 3000 samples, 3 workers of 50: 20 steps per epoch, 3 epochs.
job_spec checkpointed(sync_mode mode, const fs::path& dir, std::uint32_t servers = 2) {
  job_spec j;
  j.job_id = "checkpointed-job";
  j.mode = mode;
  j.workers = 3;
  j.servers = servers;
  j.train.epochs = 3;
  j.train.batch_size = 50;
  j.stall_timeout_ms = 60000;
  j.checkpoints.dir = dir.string();
  j.checkpoints.every = 7;
  j.checkpoints.keep = 100;
  j.checkpoints.queue = 64;  // the tests count checkpoints: a loaded machine's slow disk must not skip any
  return j;
}

// Runs `job` from the newest good checkpoint in its directory.
caf::expected<job_result> resumed(job_spec job, std::shared_ptr<const dataset_split> data) {
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE(m.has_value());
  auto from = find_resume(job.checkpoints.dir, job, m->num_params());
  BOOST_REQUIRE_MESSAGE(from.has_value(), (from ? "" : from.error().message));
  return run_job_in_process(job, std::move(data), {}, {}, {}, *from);
}

// Leaves only checkpoints up to `step` in dir.
void keep_up_to(const fs::path& dir, std::int64_t step) {
  const checkpoint_store store(dir, 1);
  for (auto s : store.complete())
    if (s > step) fs::remove_all(store.step_dir(s));
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_resumed_sync_job_ends_bitwise_as_the_uninterrupted_one) {
  test::temp_dir tmp("shard-ckpt-sync");
  auto data = synthetic(3000);
  const job_result whole = run_ok(checkpointed(sync_mode::sync, tmp.path / "a"), data);
  // Every 7 steps and every epoch's end (20, 40, 60).
  const std::vector<std::int64_t> steps{60, 56, 49, 42, 40, 35, 28, 21, 20, 14, 7};
  BOOST_TEST(checkpoint_store(tmp.path / "a", 1).complete() == steps, boost::test_tools::per_element());
  BOOST_TEST(whole.checkpoints_written == 11);
  BOOST_TEST(whole.checkpoints_failed == 0);
  for (std::uint32_t servers : {2u, 3u}) {
    const fs::path dir = tmp.path / ("b" + std::to_string(servers));
    fs::copy(tmp.path / "a", dir, fs::copy_options::recursive);
    keep_up_to(dir, 28);  // mid-epoch 1
    const job_result r = [&] {
      auto out = resumed(checkpointed(sync_mode::sync, dir, servers), data);
      BOOST_REQUIRE_MESSAGE(static_cast<bool>(out), (out ? "" : describe(out.error())));
      return *out;
    }();
    BOOST_TEST(r.resumed_from_step == 28);
    BOOST_TEST(same_bits(r.params, whole.params), "resumed on " << servers << " shard servers");
    BOOST_TEST(r.samples == 3 * 50 * (60 - 28));
    BOOST_TEST(r.samples_planned == r.samples);
    BOOST_TEST(r.checkpoints_written == 6);  // 35, 40, 42, 49, 56, 60
  }
}

// Note [Residuals in checkpoints]: each member's file is named in the checkpoint, and the
// resumed run is bitwise the uninterrupted one only with the residuals it holds.
BOOST_AUTO_TEST_CASE(a_resumed_sync_job_with_2bit_pushes_ends_bitwise_with_its_residuals) {
  test::temp_dir tmp("shard-ckpt-2bit");
  auto data = synthetic(3000);
  auto two_bit = [](const fs::path& dir) {
    job_spec j = checkpointed(sync_mode::sync, dir);
    j.compression = *parse_grad_codec("2bit");
    return j;
  };
  const job_result whole = run_ok(two_bit(tmp.path / "a"), data);
  BOOST_TEST(whole.checkpoints_written == 11);
  const checkpoint_store store(tmp.path / "a", 1);
  for (std::uint32_t r = 0; r < 3; ++r)
    BOOST_TEST(fs::exists(store.step_dir(28) / residual_file_name(r)));
  for (const bool zeroed : {false, true}) {
    BOOST_TEST_CONTEXT((zeroed ? "residuals replaced by zeros" : "residuals as written")) {
      const fs::path dir = tmp.path / (zeroed ? "zeroed" : "kept");
      fs::copy(tmp.path / "a", dir, fs::copy_options::recursive);
      keep_up_to(dir, 28);
      const job_spec job = two_bit(dir);
      job_spec prepared = job;
      const auto m = prepare_job(prepared, *data);
      BOOST_REQUIRE(m.has_value());
      const fs::path step_dir = checkpoint_store(dir, 1).step_dir(28);
      if (zeroed)  // valid files for the same members and step, but empty residuals
        for (std::uint32_t r = 0; r < 3; ++r)
          BOOST_REQUIRE(!write_residual_image(step_dir / residual_file_name(r),
                                              {r, 28, 3, tensor({m->num_params()})},
                                              identity_of(prepared, m->num_params())));
      auto out = resumed(job, data);
      BOOST_REQUIRE_MESSAGE(static_cast<bool>(out), (out ? "" : describe(out.error())));
      BOOST_TEST(out->resumed_from_step == 28);
      BOOST_TEST(same_bits(out->params, whole.params) == !zeroed);
    }
  }
}

BOOST_AUTO_TEST_CASE(checkpoint_seconds_add_checkpoints_between_the_steps) {
  test::temp_dir tmp("shard-ckpt-seconds");
  auto data = synthetic(3000);
  job_spec job = checkpointed(sync_mode::sync, tmp.path);
  job.checkpoints.every = 0;  // epoch ends (20, 40, 60) ...
  job.checkpoints.seconds = 1.0;  // ... and about every second
  job.slow_worker = 0;
  job.slow_factor = 60;  // a job of a few seconds, even on an idle machine (the tick is 1 s)
  const job_result r = run_ok(job, data);
  const auto steps = checkpoint_store(tmp.path, 1).complete();
  BOOST_TEST(r.checkpoints_failed == 0);
  BOOST_TEST(r.checkpoints_written == static_cast<std::int64_t>(steps.size()));
  BOOST_TEST(std::count_if(steps.begin(), steps.end(), [](std::int64_t s) { return s % 20 != 0; }) >= 1,
             "checkpoints between the epoch ends: " << steps.size() - 3);
}

BOOST_AUTO_TEST_CASE(a_resumed_async_job_trains_on) {
  test::temp_dir tmp("shard-ckpt-async");
  auto data = synthetic(3000);
  job_spec job = checkpointed(sync_mode::async, tmp.path);
  job.train.epochs = 2;
  const job_result first = run_ok(job, data);
  BOOST_TEST(first.checkpoints_written >= 4);  // 7, 14, 20 (or later, as the slowest passes), 40
  keep_up_to(tmp.path, 20);
  job.train.epochs = 3;
  auto r = resumed(job, data);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(r->resumed_from_step >= 14);
  BOOST_TEST(r->test_accuracy >= first.test_accuracy - 0.05);
}

BOOST_AUTO_TEST_CASE(an_unwritable_directory_is_counted_and_training_goes_on) {
  test::temp_dir tmp("shard-ckpt-unwritable");
  std::ofstream(tmp.path / "a-file") << "not a directory";
  auto data = synthetic(3000);
  job_spec job = checkpointed(sync_mode::sync, tmp.path / "a-file" / "checkpoints");
  job.train.epochs = 1;
  live_job live;
  auto r = live.run(job, data);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(r->checkpoints_written == 0);
  BOOST_TEST(r->checkpoints_failed == 3);  // 7, 14, 20
  BOOST_TEST(live.events_with("training goes on") == 3);
  BOOST_TEST(live.events_with("a-file") == 3);
  job.checkpoints.fatal = true;
  auto fatal = run_job_in_process(job, data);
  BOOST_REQUIRE(!fatal);
  BOOST_TEST((troupe_code(fatal.error()) == errc::checkpoint_failed));
  BOOST_TEST(has(describe(fatal.error()), "checkpoint 7"));
}

namespace {

// A full disk, as RLIMIT_FSIZE makes one: every file larger than 64 KiB fails to write.
struct small_disk {
  rlimit before{};
  void (*handler)(int) = nullptr;
  small_disk() {
    ::getrlimit(RLIMIT_FSIZE, &before);
    handler = std::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
    rlimit small = before;
    small.rlim_cur = 64 * 1024;
    ::setrlimit(RLIMIT_FSIZE, &small);
  }
  ~small_disk() {
    ::setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, handler);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_full_disk_leaves_the_last_good_checkpoint_loadable) {
  test::temp_dir tmp("shard-ckpt-full");
  auto data = synthetic(3000);
  job_spec job = checkpointed(sync_mode::sync, tmp.path);
  job.train.epochs = 1;
  const job_result first = run_ok(job, data);
  BOOST_TEST(first.checkpoints_written == 3);  // 7, 14, 20
  job.train.epochs = 2;
  job_result second;
  {
    small_disk full;
    auto r = resumed(job, data);
    BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
    second = *r;
  }
  BOOST_TEST(second.resumed_from_step == 20);
  BOOST_TEST(second.checkpoints_written == 0);
  BOOST_TEST(second.checkpoints_failed == 4);  // 21, 28, 35, 40
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE(m.has_value());
  auto from = find_resume(tmp.path, job, m->num_params());
  BOOST_REQUIRE_MESSAGE(from.has_value(), (from ? "" : from.error().message));
  BOOST_TEST(from->step == 20);  // the failed ones changed nothing of it
  BOOST_TEST(from->skipped.empty());
}

BOOST_AUTO_TEST_CASE(a_shard_that_cannot_read_its_state_ends_the_job_naming_it) {
  test::temp_dir tmp("shard-ckpt-unreadable");
  auto data = synthetic(3000);
  job_spec job = checkpointed(sync_mode::sync, tmp.path);
  job.train.epochs = 1;
  run_ok(job, data);
  job.train.epochs = 2;
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE(m.has_value());
  auto from = find_resume(tmp.path, job, m->num_params());
  BOOST_REQUIRE(from.has_value());
  fs::resize_file(fs::path(from->shards.dir) / "shard-1.tf", 100);  // damaged after the check
  auto r = run_job_in_process(job, data, {}, {}, {}, *from);
  BOOST_REQUIRE(!r);
  BOOST_TEST(has(describe(r.error()), "cannot resume"), describe(r.error()));
  BOOST_TEST(has(describe(r.error()), "shard-1.tf"), describe(r.error()));
}
