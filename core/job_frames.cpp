// job_frames: the job's largest message.
#include "core/job_frames.hpp"

#include <algorithm>

#include "core/key_table.hpp"
#include "core/pipeline_layout.hpp"
#include "transport/frame_bound.hpp"

namespace troupe {

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

}  // namespace troupe
