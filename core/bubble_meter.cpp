// bubble_meter: per-step windows of each replica, summed into per-epoch and job totals.
#include "core/bubble_meter.hpp"

#include <algorithm>

namespace troupe {

// Note [Measuring the bubble]
// Every stage reports, per step, its busy time (forwards and backwards) and the window
// from its first forward's start to its last backward's end. Under both schedules stage
// 0 runs the minibatch's first action (forward 0) and its last (backward M-1), so stage
// 0's window is the pipeline's makespan for that step, measured on one clock. Once all K
// stages of a replica have reported a step, its bubble is the share of K * makespan no
// stage spent computing: 1 - sum(busy) / (K * makespan), the quantity (K - 1) / (M + K - 1)
// predicts for equal stages. (A union of all stages' windows would count twice the time
// a later stage spends in step t+1 while stage 0 finishes step t.)
void bubble_meter::note(const step_report& r) {
  const std::pair<std::uint32_t, std::int64_t> key{r.rank / stages_, r.clock};
  step_window& w = windows_[key];
  ++w.reports;
  w.busy += r.busy_seconds;
  if (r.rank % stages_ == 0) {
    w.begin_us = r.window_begin_us;
    w.end_us = r.window_end_us;
  }
  if (w.reports < stages_) return;
  const double capacity =
      static_cast<double>(stages_) * static_cast<double>(std::max<std::int64_t>(0, w.end_us - w.begin_us)) / 1e6;
  for (total* t : {&epochs_[r.epoch], &all_}) {
    t->busy += w.busy;
    t->capacity += capacity;
  }
  windows_.erase(key);
}

double bubble_meter::fraction(std::int32_t epoch) const {
  auto it = epochs_.find(epoch);
  return it == epochs_.end() ? 0.0 : it->second.fraction();
}

}  // namespace troupe
