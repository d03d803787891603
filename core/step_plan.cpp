// step_plan: one training step's actions, progress and timings.
#include "core/step_plan.hpp"

#include <utility>

namespace troupe {

void step_plan::start(std::int64_t at_clock, std::int64_t rows, int microbatches, std::vector<pipeline_action> acts,
                      wall::time_point now) {
  running = true;
  clock = at_clock;
  batch = rows;
  parts = microbatches;
  actions = std::move(acts);
  next = 0;
  slot_of.assign(static_cast<std::size_t>(microbatches), -1);
  forward_open = false;
  bucket_next = 0;
  backward_in = tensor();
  pushed = false;
  loss = busy = forward_s = backward_s = 0.0;
  params_ready = now;
  first_action.reset();
}

void step_plan::computed(bool forward, wall::time_point t0, wall::time_point t1) {
  const double s = std::chrono::duration<double>(t1 - t0).count();
  busy += s;
  (forward ? forward_s : backward_s) += s;
}

}  // namespace troupe
