// Tests for core/member_checkpoint.cpp (Note [Members' checkpoints]), stepped without
// actors or threads (tests/support/member_bench.hpp): in --mode allreduce only replica 0's
// stages write checkpoints, at the multiples of --checkpoint-every, every epoch's end and
// the steps the coordinator asks for, each holding its stage's range; a job resumed from
// them (the files written as the shell writes them) ends bitwise where the uninterrupted
// one does; a stage restores its range from files cut another way; a damaged or missing
// file stops the member with checkpoint_failed naming it; no --checkpoint-dir, no files.
// In sync with 2-bit pushes to a shard (Note [Residuals in checkpoints]) every member
// writes its residuals at the due steps, and a resumed member takes them only when they
// were written for its rank, its job's members and its clock, and says why not otherwise.
#define BOOST_TEST_MODULE member_checkpoint
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/checkpoint_store.hpp"
#include "core/job_checkpoint.hpp"
#include "core/residual_checkpoint.hpp"
#include "tests/support/member_bench.hpp"
#include "tests/support/numeric.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using test::member_bench;
using test::same_bits;
using test::synthetic;

namespace {

// 3 replicas of 120 samples each, batch 20: 6 steps an epoch, 2 epochs.
job_spec ring_job(std::uint32_t stages = 1, const char* dir = "/checkpoints") {
  job_spec j;
  j.job_id = "ring-checkpoints";
  j.mode = sync_mode::allreduce;
  j.workers = 3;
  j.servers = 0;
  j.pipeline_stages = stages;
  j.train.epochs = 2;
  j.train.batch_size = 20;
  j.ring_piece_elems = 1000;
  j.checkpoints.dir = dir;
  j.checkpoints.every = 4;
  return j;
}

// 2 workers of 120 samples each, batch 20: 6 steps an epoch, 2 epochs; 2-bit pushes to
// one shard server, a checkpoint every 4 steps.
job_spec two_bit_job(const std::filesystem::path& dir, std::uint32_t workers = 2) {
  job_spec j;
  j.job_id = "residual-checkpoints";
  j.mode = sync_mode::sync;
  j.workers = workers;
  j.servers = 1;
  j.train.epochs = 2;
  j.train.batch_size = 20;
  j.compression = *parse_grad_codec("2bit");
  j.checkpoints.dir = dir.string();
  j.checkpoints.every = 4;
  return j;
}

tensor run_to_end(member_bench& bench, std::int64_t resume_clock = 0) {
  bench.start(resume_clock);
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_REQUIRE_EQUAL(bench.done.size(), bench.members.size());
  return *bench.members[0]->local_params();
}

// Writes the files of checkpoint `step` as the shell does; their names, by stage.
std::vector<std::string> write_step(const member_bench& bench, std::int64_t step, const std::filesystem::path& dir) {
  std::map<std::uint32_t, std::string> files;
  for (const auto& [rank, c] : bench.checkpoints) {
    if (c.saved.step != step) continue;
    BOOST_REQUIRE(!write_shard_image(dir / c.saved.file, *c.image, c.id));
    files[c.saved.shard] = c.saved.file;
  }
  std::vector<std::string> out;
  for (const auto& [stage, f] : files) out.push_back(f);
  return out;
}

// The files of checkpoint 8 of a 2-stage ring run to its end, written into dir; the run.
std::vector<std::string> checkpoint_eight(member_bench& split, const std::filesystem::path& dir) {
  run_to_end(split);
  std::filesystem::create_directories(dir);
  return write_step(split, 8, dir);
}

}  // namespace

BOOST_AUTO_TEST_CASE(replica_zeros_stages_write_their_range_at_the_due_steps) {
  auto data = synthetic(360);
  member_bench bench(ring_job(2), data);
  bench.start();
  // --checkpoint-seconds' step, which the coordinator sends replica 0's stages.
  bench.members[0]->on_checkpoint_request(3);
  bench.members[1]->on_checkpoint_request(3);
  bench.members[2]->on_checkpoint_request(3);  // replica 1 writes nothing
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  std::map<std::uint32_t, std::set<std::int64_t>> steps;
  const auto spans = job_stage_spans(bench.job, bench.m);
  for (const auto& [rank, c] : bench.checkpoints) {
    BOOST_TEST(rank < 2u);  // replica 0's stages only
    BOOST_TEST(c.saved.shard == rank);
    BOOST_TEST(c.saved.file == "stage-" + std::to_string(rank) + ".tf");
    BOOST_TEST(c.saved.version == c.saved.step);
    BOOST_TEST(c.image->step == c.saved.step);
    BOOST_REQUIRE(c.image->ranges.size() == 1u);
    BOOST_TEST(c.image->ranges[0].first == spans[rank].param_offset);
    BOOST_TEST(c.image->ranges[0].second == spans[rank].numel);
    BOOST_TEST(c.image->params.numel() == spans[rank].numel);
    BOOST_TEST(c.image->slot1.numel() == spans[rank].numel);  // SGD's velocity
    BOOST_TEST(c.image->slot2.empty());
    BOOST_TEST(c.id.job_id == "ring-checkpoints");
    BOOST_TEST(c.id.num_params == bench.m.num_params());
    steps[rank].insert(c.saved.step);
  }
  // Every 4 steps, every epoch's end (6, 12), and the asked-for 3.
  const std::set<std::int64_t> want{3, 4, 6, 8, 12};
  BOOST_TEST(steps[0] == want, boost::test_tools::per_element());
  BOOST_TEST(steps[1] == want, boost::test_tools::per_element());
  // The last one holds the parameters the job ends with.
  for (const auto& [rank, c] : bench.checkpoints)
    if (c.saved.step == 12) BOOST_TEST(same_bits(c.image->params, *bench.members[rank]->local_params()));
}

BOOST_AUTO_TEST_CASE(a_ring_resumed_from_its_checkpoint_ends_bitwise_where_it_would_have) {
  auto data = synthetic(360);
  test::temp_dir tmp("member-ckpt-resume");
  for (std::uint32_t stages : {1u, 2u})
    for (std::int64_t step : {4, 6, 8})
      BOOST_TEST_CONTEXT(stages << " stages, from step " << step) {
        member_bench whole(ring_job(stages), data);
        const tensor end = run_to_end(whole);
        const auto dir = tmp.path / (std::to_string(stages) + "-" + std::to_string(step));
        std::filesystem::create_directories(dir);
        member_bench resumed(ring_job(stages), data);
        resumed.resume = {dir.string(), write_step(whole, step, dir), step};
        BOOST_TEST(resumed.resume.files.size() == stages);
        BOOST_TEST(same_bits(run_to_end(resumed, step), end));
        for (std::uint32_t r = 0; r < resumed.members.size(); ++r)
          BOOST_TEST(same_bits(*resumed.members[r]->local_params(), *whole.members[r]->local_params()));
        // It takes no checkpoint at the step it resumed from, and the later ones again.
        std::set<std::int64_t> again;
        for (const auto& [rank, c] : resumed.checkpoints) again.insert(c.saved.step);
        BOOST_TEST(!again.count(step));
        BOOST_TEST(again.count(12));
      }
}

// A checkpoint of a 2-stage pipeline, restored by an unsplit ring: the files tile the
// same flat vector.
BOOST_AUTO_TEST_CASE(a_stage_restores_its_range_from_files_cut_another_way) {
  auto data = synthetic(360);
  test::temp_dir tmp("member-ckpt-recut");
  member_bench split(ring_job(2), data);
  const auto dir = tmp.path / "recut";
  const auto files = checkpoint_eight(split, dir);
  BOOST_REQUIRE(files.size() == 2u);
  tensor want({split.m.num_params()});
  for (const auto& [rank, c] : split.checkpoints)
    if (c.saved.step == 8) copy(want.view().flat(c.image->ranges[0].first, c.image->ranges[0].second), c.image->params);
  member_bench whole(ring_job(1), data);
  whole.resume = {dir.string(), files, 8};
  for (std::uint32_t r = 0; r < whole.members.size(); ++r) {
    whole.deliver(r, whole.members[r]->on_welcome(whole.assignment(r, 8)));
    BOOST_TEST(same_bits(*whole.members[r]->local_params(), want));
  }
  BOOST_TEST(whole.stopped.empty());
}

BOOST_AUTO_TEST_CASE(a_damaged_or_missing_file_stops_the_member_naming_it) {
  auto data = synthetic(360);
  test::temp_dir tmp("member-ckpt-bad");
  member_bench whole(ring_job(2), data);
  const auto dir = tmp.path / "bad";
  const auto files = checkpoint_eight(whole, dir);
  std::filesystem::resize_file(dir / "stage-1.tf", 64);
  member_bench torn(ring_job(2), data);
  torn.resume = {dir.string(), files, 8};
  torn.start(8);
  for (std::uint32_t r : {1u, 3u, 5u}) {  // stage 1 of every replica reads the torn file
    BOOST_REQUIRE(torn.stopped.count(r));
    BOOST_TEST((torn.stopped.at(r).code == errc::checkpoint_failed));
    BOOST_TEST(torn.stopped.at(r).detail.find("stage-1.tf") != std::string::npos, torn.stopped.at(r).detail);
    BOOST_TEST(torn.stopped.at(r).detail.find("cannot resume from") != std::string::npos);
  }
  member_bench missing(ring_job(2), data);
  missing.resume = {dir.string(), {"stage-0.tf", "stage-7.tf"}, 8};
  missing.start(8);
  BOOST_TEST(!missing.stopped.count(0));  // stage 0's own file holds its range
  BOOST_REQUIRE(missing.stopped.count(1));
  BOOST_TEST(missing.stopped.at(1).detail.find("stage-7.tf") != std::string::npos, missing.stopped.at(1).detail);
}

BOOST_AUTO_TEST_CASE(without_a_checkpoint_directory_no_member_writes) {
  member_bench bench(ring_job(1, ""), synthetic(360));
  run_to_end(bench);
  BOOST_TEST(bench.checkpoints.empty());
  BOOST_TEST(!bench.members[0]->writes_checkpoints());
}

BOOST_AUTO_TEST_CASE(sync_members_with_2bit_pushes_write_their_residuals_at_the_due_steps) {
  test::temp_dir tmp("member-residuals");
  member_bench bench(two_bit_job(tmp.path), synthetic(240));
  bench.start();
  for (auto& m : bench.members) {
    BOOST_TEST(m->writes_residuals());
    m->on_checkpoint_request(3);  // --checkpoint-seconds' step, which the coordinator sends every member
  }
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.warnings.empty(), (bench.warnings.empty() ? "" : bench.warnings.front()));
  BOOST_TEST(bench.checkpoints.empty());  // the parameters are the shard's to write
  const checkpoint_store store(tmp.path, 1);
  const checkpoint_identity id = identity_of(bench.job, bench.m.num_params());
  for (std::int64_t step = 1; step <= 12; ++step) {
    const bool due = step == 3 || step % 4 == 0 || step % 6 == 0;  // asked for, every 4, epoch ends
    for (std::uint32_t r = 0; r < 2; ++r) {
      BOOST_TEST_CONTEXT("step " << step << ", member " << r) {
        const auto path = store.step_dir(step) / residual_file_name(r);
        BOOST_TEST(std::filesystem::exists(path) == due);
        if (!due) continue;
        auto image = read_residual_image(path, id);
        BOOST_REQUIRE_MESSAGE(image.has_value(), (image ? "" : image.error().message));
        BOOST_TEST(image->rank == r);
        BOOST_TEST(image->step == step);
        BOOST_TEST(image->members == 2u);
        BOOST_REQUIRE(image->residual.numel() == bench.m.num_params());
        const float* v = image->residual.data<float>();
        BOOST_TEST(std::count_if(v, v + image->residual.numel(), [](float x) { return x != 0.f; }) > 0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_resumed_member_takes_its_residuals_only_when_they_were_written_for_it) {
  auto data = synthetic(240);
  test::temp_dir tmp("member-residuals-resume");
  member_bench whole(two_bit_job(tmp.path / "run"), data);
  whole.start();
  whole.run();
  BOOST_REQUIRE(whole.stopped.empty());
  const auto four = checkpoint_store(tmp.path / "run", 1).step_dir(4);
  // Welcomes member 0 of a job resuming from `dir` at `clock`; what it warned of.
  auto welcome = [&](const std::filesystem::path& dir, std::int64_t clock, std::uint32_t workers = 2) {
    member_bench b(two_bit_job(tmp.path / "resumed", workers), data);
    b.resume = {dir.string(), {"shard-0.tf"}, clock};
    b.deliver(0, b.members[0]->on_welcome(b.assignment(0, clock)));
    BOOST_TEST(b.stopped.empty());  // a member without its residuals trains on
    return b.warnings;
  };
  BOOST_TEST(welcome(four, 4).empty());  // its own: taken without a word
  const std::string zero = "worker 0 starts its 2-bit residuals at zero";
  struct wrong {
    std::filesystem::path dir;
    std::int64_t clock;
    std::uint32_t workers;
    std::string says;
  };
  std::filesystem::create_directories(tmp.path / "empty");
  std::filesystem::copy(four, tmp.path / "torn");
  std::filesystem::resize_file(tmp.path / "torn" / "member-0.tf", 64);
  for (const wrong& w : {wrong{four, 8, 2, "member 0 of 2 at step 4, and this is member 0 of 2 resuming at step 8"},
                         wrong{four, 4, 3, "member 0 of 2 at step 4, and this is member 0 of 3 resuming at step 4"},
                         wrong{tmp.path / "empty", 4, 2, "holds no member-0.tf"},
                         wrong{tmp.path / "torn", 4, 2, "member-0.tf"}}) {
    BOOST_TEST_CONTEXT(w.says) {
      const auto warned = welcome(w.dir, w.clock, w.workers);
      BOOST_REQUIRE(warned.size() == 1u);
      BOOST_TEST(warned[0].find(zero) == 0u, warned[0]);
      BOOST_TEST(warned[0].find(w.says) != std::string::npos, warned[0]);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_residual_file_that_cannot_be_written_is_warned_about_and_training_goes_on) {
  test::temp_dir tmp("member-residuals-unwritable");
  std::ofstream(tmp.path / "a-file") << "not a directory";
  member_bench bench(two_bit_job(tmp.path / "a-file" / "checkpoints"), synthetic(240));
  bench.start();
  bench.run();
  BOOST_TEST(bench.stopped.empty());
  BOOST_TEST(bench.done.size() == 2u);
  BOOST_REQUIRE(!bench.warnings.empty());
  BOOST_TEST(bench.warnings.front().find("could not write its 2-bit residuals for checkpoint 4") != std::string::npos,
             bench.warnings.front());
  BOOST_TEST(bench.warnings.front().find("starts them at zero") != std::string::npos);
}
