// frame_bound: the process-wide bound on a frame from the network.
#include "transport/frame_bound.hpp"

#include <atomic>

namespace troupe {

namespace {

std::atomic<std::uint64_t> bound{frame_bound_before_the_job};

}  // namespace

void set_frame_bound(std::uint64_t bytes) { bound.store(bytes, std::memory_order_relaxed); }

std::uint64_t frame_bound() { return bound.load(std::memory_order_relaxed); }

}  // namespace troupe
