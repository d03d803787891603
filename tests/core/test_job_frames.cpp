// Tests for core/job_frames.cpp: a job's largest frame is its largest shard slice, stage
// parameter vector or microbatch of activations, plus headroom.
#define BOOST_TEST_MODULE job_frames
#include <boost/test/unit_test.hpp>

#include "core/job_frames.hpp"
#include "tests/support/models.hpp"
#include "transport/frame_bound.hpp"

using namespace troupe;

namespace {

job_spec fashion_job() {
  job_spec j;
  j.input_shape = {1, 28, 28};
  j.num_classes = 10;
  j.train_size = 60000;
  return j;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_largest_shard_sets_a_data_parallel_jobs_bound) {
  const model m = test::build_model("mlp");  // 235,146 parameters
  job_spec j = fashion_job();
  j.servers = 1;
  BOOST_TEST(max_frame_bytes(j, m) == 235146u * 4 + frame_headroom);
  j.servers = 2;
  const auto table = partition_parameters(m, 2, 0);
  const auto largest = std::max(table.shard_numel[0], table.shard_numel[1]);
  BOOST_TEST(largest < 235146);
  // With no pipeline the one stage holds every parameter, which a --servers 0 stage reports.
  BOOST_TEST(max_frame_bytes(j, m) == 235146u * 4 + frame_headroom);
}

BOOST_AUTO_TEST_CASE(a_pipelines_activations_count_when_they_are_the_largest) {
  const model m = test::build_model("cnn");
  job_spec j = fashion_job();
  j.servers = 1;
  j.pipeline_stages = 2;
  j.cuts = {2};  // after conv1 + relu: the second stage takes (32, 28, 28) per sample
  j.train.batch_size = 1024;
  j.microbatches = 2;
  const std::uint64_t activations = 512u * 32 * 28 * 28 * 4;
  BOOST_TEST(activations > static_cast<std::uint64_t>(m.num_params()) * 4);
  BOOST_TEST(max_frame_bytes(j, m) == activations + frame_headroom);
}
