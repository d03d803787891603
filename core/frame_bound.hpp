// The largest BASP frame this process accepts from the network (Note [Bounded frames] in
// net/basp_frame_guard.cpp): 64 MiB until the process knows its job, then the largest
// message the job can send plus headroom. The cores set it when they learn the job; the
// transport reads it for every frame header. Process-wide, thread-safe.
#pragma once

#include <cstdint>

#include "core/job.hpp"
#include "tensor/model.hpp"

namespace troupe {

inline constexpr std::uint64_t frame_bound_before_the_job = std::uint64_t{64} << 20;
// Room for a message's fields around its tensor (ids, clocks, a job spec, a key table).
inline constexpr std::uint64_t frame_headroom = std::uint64_t{1} << 20;

// The largest message a job of this spec sends over the network: the largest shard slice,
// stage parameter vector or microbatch of activations, in bytes, plus frame_headroom.
std::uint64_t max_frame_bytes(const job_spec& job, const model& m);

void set_frame_bound(std::uint64_t bytes);
std::uint64_t frame_bound();

}  // namespace troupe
