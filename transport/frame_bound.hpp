// The largest BASP or lane frame this process accepts from the network (Note [Bounded
// frames] in net/basp_frame_guard.cpp): 64 MiB until the process knows its job, then the
// largest message the job can send (core/job_frames.hpp). The shells set it when their
// core has learnt the job; the transport reads it for every frame header. Process-wide,
// thread-safe; no core sets it, so cores stay free of process state.
#pragma once

#include <cstdint>

namespace troupe {

inline constexpr std::uint64_t frame_bound_before_the_job = std::uint64_t{64} << 20;
// Room for a message's fields around its tensor (ids, clocks, a job spec, a key table).
inline constexpr std::uint64_t frame_headroom = std::uint64_t{1} << 20;

void set_frame_bound(std::uint64_t bytes);
std::uint64_t frame_bound();

}  // namespace troupe
