// Tests for core/job_checkpoint.cpp (Note [Resuming a job]): a committed checkpoint is
// found again with the shards' files and the clock to go on from, and its whole model
// assembled from them; a damaged newer one is passed over, saying why; another job's or model's checkpoints, an empty directory and
// a checkpoint at the job's end are refused by name (but a restart in place takes the end); the resumed clock is the step itself
// on the same shape, and re-deals the interrupted epoch on another one; a job that keeps
// residuals has the members' files named and checked with the rest.
#define BOOST_TEST_MODULE job_checkpoint
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <fstream>

#include "core/job_checkpoint.hpp"
#include "core/residual_checkpoint.hpp"
#include "tensor/tensor_file.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tiny_job.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

constexpr std::int64_t params = 15;  // mlp:4-3

// The tiny job with batches of 10: 50 samples and 5 steps per worker and epoch.
job_spec job_of(std::uint32_t workers = 2, std::uint32_t servers = 2) {
  job_spec j = test::tiny_job(sync_mode::sync, workers, servers);
  j.train.batch_size = 10;
  return j;
}

// Checkpoint `step` of `job` in `dir`, each shard's file holding its share of 15 zeros,
// and each member in `residuals` a file of its residuals.
void checkpoint(const fs::path& dir, const job_spec& job, std::int64_t step,
                const std::vector<std::uint32_t>& residuals = {}) {
  const checkpoint_store store(dir, 10);
  auto d = store.begin(step);
  BOOST_REQUIRE(d.has_value());
  for (std::uint32_t r : residuals)
    BOOST_REQUIRE(!write_residual_image(*d / residual_file_name(r), {r, step, job.workers, tensor({params})},
                                        identity_of(job, params)));
  std::vector<checkpoint_saved> saved;
  std::int64_t offset = 0;
  for (std::uint32_t s = 0; s < job.servers; ++s) {
    const std::int64_t len = s + 1 < job.servers ? params / job.servers : params - offset;
    shard_image img;
    img.shard = s;
    img.step = step;
    img.version = step;
    img.ranges = {{offset, len}};
    img.params = tensor::uninitialized({len});
    for (std::int64_t i = 0; i < len; ++i) img.params.data<float>()[i] = static_cast<float>(offset + i) + 0.5f;
    img.slot1 = tensor({len});
    offset += len;
    BOOST_REQUIRE(!write_shard_image(*d / shard_file_name(s), img, identity_of(job, params)));
    saved.push_back({s, step, step, shard_file_name(s), {}});
  }
  const auto why = commit_job_checkpoint(store, job, params, step, saved);
  BOOST_REQUIRE_MESSAGE(!why, why.value_or(""));
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_committed_checkpoint_is_found_with_the_clock_to_go_on_from) {
  test::temp_dir dir("job-ckpt-found");
  const job_spec job = job_of();
  checkpoint(dir.path, job, 3);
  checkpoint(dir.path, job, 5);
  auto id = checkpointed_job_id(dir.path);
  BOOST_REQUIRE(id.has_value());
  BOOST_TEST(*id == "job-under-test");
  auto r = find_resume(dir.path, job, params);
  BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
  BOOST_TEST(r->step == 5);
  BOOST_TEST(r->clock == 5);
  BOOST_TEST(r->shards.clock == 5);
  BOOST_TEST(r->shards.dir == (dir.path / "ckpt-000000000005").string());
  BOOST_TEST(r->shards.files == (std::vector<std::string>{"shard-0.tf", "shard-1.tf"}), boost::test_tools::per_element());
  BOOST_TEST(r->skipped.empty());
}

BOOST_AUTO_TEST_CASE(the_whole_model_is_assembled_from_the_shards_files) {
  test::temp_dir dir("job-ckpt-model");
  job_spec job = job_of(2, 3);
  checkpoint(dir.path, job, 4);
  auto m = read_checkpointed_model(dir.path);
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  BOOST_TEST(m->step == 4);
  BOOST_TEST(m->job_id == "job-under-test");
  BOOST_TEST(m->model == "mlp:4-3");
  BOOST_TEST(m->input_shape == (std::vector<std::int64_t>{4}), boost::test_tools::per_element());
  BOOST_TEST(m->classes == 3);
  BOOST_REQUIRE(m->params.numel() == params);
  for (std::int64_t i = 0; i < params; ++i) BOOST_TEST(m->params.data<float>()[i] == static_cast<float>(i) + 0.5f);
  BOOST_TEST(!read_checkpointed_model(dir.path / "missing").has_value());
}

BOOST_AUTO_TEST_CASE(a_damaged_newer_checkpoint_is_passed_over_saying_why) {
  test::temp_dir dir("job-ckpt-damaged");
  const job_spec job = job_of();
  checkpoint(dir.path, job, 3);
  checkpoint(dir.path, job, 5);
  fs::resize_file(dir.path / "ckpt-000000000005" / "shard-1.tf", 40);
  auto r = find_resume(dir.path, job, params);
  BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
  BOOST_TEST(r->step == 3);
  BOOST_REQUIRE(r->skipped.size() == 1u);
  BOOST_TEST(has(r->skipped[0], "checkpoint 5"));
  BOOST_TEST(has(r->skipped[0], "shard-1.tf"));
}

BOOST_AUTO_TEST_CASE(another_jobs_or_models_checkpoints_are_refused_by_name) {
  test::temp_dir dir("job-ckpt-other");
  checkpoint(dir.path, job_of(), 3);
  job_spec other = job_of();
  other.job_id = "job-b";
  auto r = find_resume(dir.path, other, params);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "job-under-test"));
  other = job_of();
  other.train.model = "mlp:4-8-3";
  r = find_resume(dir.path, other, 67);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "mlp:4-3"));
  other = job_of();
  other.train.optimizer.kind = optimizer_kind::adam;
  r = find_resume(dir.path, other, params);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "optimizer"));
}

BOOST_AUTO_TEST_CASE(an_empty_directory_and_a_checkpoint_at_the_jobs_end_are_refused) {
  test::temp_dir dir("job-ckpt-none");
  auto r = find_resume(dir.path, job_of(), params);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "no complete checkpoint"));
  BOOST_TEST(!checkpointed_job_id(dir.path).has_value());
  BOOST_TEST(!checkpointed_job_id(dir.path / "missing").has_value());
  checkpoint(dir.path, job_of(), 10);  // 2 epochs of 5 steps: the end
  r = find_resume(dir.path, job_of(), params);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "raise --epochs"));
  // A restart in place after training ended takes it (Note [A shard lost after training]).
  r = find_resume(dir.path, job_of(), params, resume_at_end::taken);
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(r->clock == 10);
  job_spec longer = job_of();
  longer.train.epochs = 3;
  r = find_resume(dir.path, longer, params);
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(r->clock == 10);
}

BOOST_AUTO_TEST_CASE(another_shape_re_deals_the_interrupted_epoch) {
  // Two workers of 10 stopped after step 7: epoch 1 and 2 of its 5 steps, so the epoch's
  // first 2 x 10 x 2 = 40 samples were trained.
  job_spec four = job_of(4);  // 25 samples and 3 steps per worker and epoch
  BOOST_TEST(steps_per_epoch(four) == 3);
  BOOST_TEST(resume_clock(four, 7, 2, 10, 5) == 3 + 1);  // a round of 40 begins at 40
  job_spec bigger = job_of();
  bigger.train.batch_size = 25;  // rounds of 50: the one at 0 begins before 40
  BOOST_TEST(resume_clock(bigger, 7, 2, 10, 5) == 2 * 1 + 0);
  BOOST_TEST(resume_clock(job_of(), 7, 2, 10, 5) == 7);  // the same shape
  BOOST_TEST(resume_clock(four, 5, 2, 10, 5) == 3);      // an epoch's end stays one
}

BOOST_AUTO_TEST_CASE(the_members_residual_files_are_named_and_checked_with_the_rest) {
  test::temp_dir dir("job-ckpt-residuals");
  job_spec job = job_of(3);
  job.compression = *parse_grad_codec("2bit");
  job.checkpoints.dir = dir.path.string();
  BOOST_REQUIRE(keeps_residuals(job));
  checkpoint(dir.path, job, 3, {0, 1, 2});
  checkpoint(dir.path, job, 5, {0, 2});  // member 1's push left before it was asked for
  const checkpoint_store store(dir.path, 10);
  auto five = store.latest_good([](const fs::path&) { return std::nullopt; });
  BOOST_REQUIRE(five.has_value());
  BOOST_TEST(five->step == 5);
  for (const char* f : {"member-0.tf", "member-2.tf"})
    BOOST_TEST((std::find(five->files.begin(), five->files.end(), f) != five->files.end()), f);
  BOOST_TEST((std::find(five->files.begin(), five->files.end(), "member-1.tf") == five->files.end()));
  auto state = read_tensor_file(five->dir / job_state_file, job_state_kind);
  BOOST_REQUIRE(state.has_value());
  BOOST_TEST(state->meta.at("member_files").dump() == R"(["member-0.tf","member-2.tf"])");
  // A damaged member file is as a damaged shard file: the checkpoint is passed over.
  fs::resize_file(dir.path / "ckpt-000000000005" / "member-2.tf", 40);
  auto r = find_resume(dir.path, job, params);
  BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
  BOOST_TEST(r->step == 3);
  BOOST_REQUIRE(r->skipped.size() == 1u);
  BOOST_TEST(has(r->skipped[0], "member-2.tf"));
  // A job that keeps none names none, whatever lies in the directory.
  test::temp_dir plain_dir("job-ckpt-no-residuals");
  const job_spec plain = job_of(3);
  checkpoint(plain_dir.path, plain, 3, {0});
  auto three = checkpoint_store(plain_dir.path, 10).latest_good([](const fs::path&) { return std::nullopt; });
  BOOST_REQUIRE(three.has_value());
  BOOST_TEST((std::find(three->files.begin(), three->files.end(), "member-0.tf") == three->files.end()));
}
