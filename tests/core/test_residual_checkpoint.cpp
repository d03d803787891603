// Tests for core/residual_checkpoint.cpp (Note [Residuals in checkpoints]): which jobs
// keep residuals; a member's file reads back exactly; a file of another job or model, a
// damaged one, one of another kind and one without its vector are refused by name; the
// files of a checkpoint's directory are listed by rank.
#define BOOST_TEST_MODULE residual_checkpoint
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <fstream>

#include "core/residual_checkpoint.hpp"
#include "tensor/tensor_file.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const checkpoint_identity id{"job-a", "mlp:4-3", 15, "sgd"};

residual_image image_of(std::uint32_t rank) {
  residual_image r{rank, 40, 4, tensor::uninitialized({15})};
  for (int i = 0; i < 15; ++i) r.residual.data<float>()[i] = 0.25f * static_cast<float>(i) - 1.f;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(only_sync_jobs_with_2bit_pushes_to_shards_and_a_directory_keep_residuals) {
  job_spec j;
  j.mode = sync_mode::sync;
  j.servers = 2;
  j.compression = *parse_grad_codec("2bit");
  j.checkpoints.dir = "/checkpoints";
  BOOST_TEST(keeps_residuals(j));
  for (sync_mode m : {sync_mode::async, sync_mode::ssp, sync_mode::allreduce}) {
    job_spec other = j;
    other.mode = m;
    BOOST_TEST(!keeps_residuals(other), name_of(m));
  }
  job_spec fp16 = j;
  fp16.compression = *parse_grad_codec("fp16");
  BOOST_TEST(!keeps_residuals(fp16));
  job_spec no_dir = j;
  no_dir.checkpoints.dir.clear();
  BOOST_TEST(!keeps_residuals(no_dir));
  job_spec no_shards = j;
  no_shards.servers = 0;
  BOOST_TEST(!keeps_residuals(no_shards));
}

BOOST_AUTO_TEST_CASE(a_members_residuals_read_back_exactly) {
  test::temp_dir dir("residuals-round-trip");
  const residual_image written = image_of(3);
  BOOST_REQUIRE(!write_residual_image(dir.path / residual_file_name(3), written, id));
  BOOST_TEST(residual_file_name(3) == "member-3.tf");
  auto read = read_residual_image(dir.path / "member-3.tf", id);
  BOOST_REQUIRE_MESSAGE(read.has_value(), (read ? "" : read.error().message));
  BOOST_TEST(read->rank == 3u);
  BOOST_TEST(read->step == 40);
  BOOST_TEST(read->members == 4u);
  BOOST_REQUIRE(read->residual.numel() == 15);
  BOOST_TEST(std::memcmp(read->residual.bytes(), written.residual.bytes(), written.residual.nbytes()) == 0);
}

BOOST_AUTO_TEST_CASE(foreign_damaged_or_malformed_files_are_refused_by_name) {
  test::temp_dir dir("residuals-refused");
  const fs::path path = dir.path / "member-0.tf";
  BOOST_REQUIRE(!write_residual_image(path, image_of(0), id));
  const checkpoint_identity other_job{"job-b", "mlp:4-3", 15, "sgd"};
  auto foreign = read_residual_image(path, other_job);
  BOOST_REQUIRE(!foreign);
  BOOST_TEST(has(foreign.error().message, "member-0.tf"));
  BOOST_TEST(has(foreign.error().message, "job-a"), foreign.error().message);
  const checkpoint_identity other_model{"job-a", "mlp:4-5", 25, "sgd"};
  BOOST_TEST(has(read_residual_image(path, other_model).error().message, "mlp:4-5"));

  fs::copy_file(path, dir.path / "torn.tf");
  fs::resize_file(dir.path / "torn.tf", 64);
  auto torn = read_residual_image(dir.path / "torn.tf", id);
  BOOST_REQUIRE(!torn);
  BOOST_TEST(has(torn.error().message, "torn.tf"));

  // A tensor file of another kind (a shard's), and one of this kind without its vector or
  // without the member's description.
  const tensor v({15});
  BOOST_REQUIRE(!write_tensor_file(dir.path / "shard.tf", "troupe-shard-state", {{"identity", id.to_json()}},
                                   {{"residual", v}}));
  BOOST_TEST(!read_residual_image(dir.path / "shard.tf", id));
  BOOST_REQUIRE(!write_tensor_file(dir.path / "empty.tf", residuals_kind,
                                   {{"identity", id.to_json()}, {"rank", 0}, {"step", 4}, {"members", 2}}, {}));
  BOOST_TEST(has(read_residual_image(dir.path / "empty.tf", id).error().message, "no f32 vector"));
  BOOST_REQUIRE(!write_tensor_file(dir.path / "nameless.tf", residuals_kind, {{"identity", id.to_json()}},
                                   {{"residual", v}}));
  BOOST_TEST(has(read_residual_image(dir.path / "nameless.tf", id).error().message, "not a member's residuals"));
}

BOOST_AUTO_TEST_CASE(the_files_of_a_directory_are_listed_by_rank) {
  test::temp_dir dir("residuals-listed");
  for (std::uint32_t r : {0u, 2u, 5u}) BOOST_REQUIRE(!write_residual_image(dir.path / residual_file_name(r), image_of(r), id));
  std::ofstream(dir.path / "member-1.tf.tmp") << "a writer's temporary";
  BOOST_TEST(residual_files_in(dir.path, 4) == (std::vector<std::string>{"member-0.tf", "member-2.tf"}),
             boost::test_tools::per_element());
  BOOST_TEST(residual_files_in(dir.path / "missing", 4).empty());
}
