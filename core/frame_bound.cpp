// frame_bound: the job's largest message, and the process-wide bound.
#include "core/frame_bound.hpp"

#include <algorithm>
#include <atomic>

#include "core/key_table.hpp"
#include "core/pipeline_layout.hpp"

namespace troupe {

namespace {

std::atomic<std::uint64_t> bound{frame_bound_before_the_job};

}  // namespace

std::uint64_t max_frame_bytes(const job_spec& job, const model& m) {
  std::int64_t floats = 0;
  if (job.servers > 0)
    for (std::int64_t n : partition_parameters(m, job.servers, job.big_array_bound).shard_numel)
      floats = std::max(floats, n);
  const std::int64_t rows = (job.train.batch_size + job.microbatches - 1) / job.microbatches;
  for (const stage_span& s : job_stage_spans(job, m)) {
    floats = std::max(floats, s.numel);
    if (s.first_layer > 0) floats = std::max(floats, rows * m.stage(s.first_layer, s.last_layer).input_shape().numel());
  }
  return static_cast<std::uint64_t>(floats) * sizeof(float) + frame_headroom;
}

void set_frame_bound(std::uint64_t bytes) { bound.store(bytes, std::memory_order_relaxed); }

std::uint64_t frame_bound() { return bound.load(std::memory_order_relaxed); }

}  // namespace troupe
