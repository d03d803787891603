// What the transport refused before any actor saw it (Note [Bounded frames] in
// net/basp_frame_guard.cpp): frames over the bound. Counted for the node's metrics and
// logged at most once a second.
#pragma once

#include <cstdint>

namespace troupe {

// Records one frame of `bytes` refused for being over `bound`.
void note_refused_frame(std::uint64_t bytes, std::uint64_t bound);
// Frames refused since the process started.
std::uint64_t refused_frames();

}  // namespace troupe
