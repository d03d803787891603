// frame_guard: counting and logging refused frames.
#include "net/frame_guard.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>

namespace troupe {

namespace {

std::atomic<std::uint64_t> refused{0};
std::atomic<std::int64_t> last_log_s{0};

}  // namespace

void note_refused_frame(std::uint64_t bytes, std::uint64_t bound) {
  const std::uint64_t n = refused.fetch_add(1) + 1;
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::int64_t last = last_log_s.load();
  if (now == last || !last_log_s.compare_exchange_strong(last, now)) return;
  spdlog::warn("refused a frame of {} bytes, over this job's bound of {} bytes, and closed its connection ({} so far)",
               bytes, bound, n);
}

std::uint64_t refused_frames() { return refused.load(); }

}  // namespace troupe
