// job_frames: the largest message a job sends over the network, which its shells make the
// process's frame bound (transport/frame_bound.hpp) once they know the job.
#pragma once

#include <cstdint>

#include "core/job.hpp"
#include "train/model.hpp"

namespace troupe {

// The largest shard slice, stage parameter vector or microbatch of activations of a job
// of this spec, in bytes, plus frame_headroom.
std::uint64_t max_frame_bytes(const job_spec& job, const model& m);

}  // namespace troupe
