// checkpoint_steps: the steps a checkpoint is due at, each taken once.
#include "core/checkpoint_steps.hpp"

#include <algorithm>

namespace troupe {

checkpoint_steps::checkpoint_steps(std::int64_t every, std::int64_t epoch_steps)
    : every_(std::max<std::int64_t>(0, every)), epoch_steps_(std::max<std::int64_t>(0, epoch_steps)) {}

void checkpoint_steps::request(std::int64_t step) {
  if (step > last_) requested_.insert(step);
}

std::optional<std::int64_t> checkpoint_steps::take_due(std::int64_t now) {
  std::int64_t due = 0;
  for (std::int64_t every : {every_, epoch_steps_})
    if (every > 0) due = std::max(due, now / every * every);
  while (!requested_.empty() && *requested_.begin() <= now) {
    due = std::max(due, *requested_.begin());
    requested_.erase(requested_.begin());
  }
  if (due <= last_) return std::nullopt;
  last_ = due;
  return due;
}

}  // namespace troupe
