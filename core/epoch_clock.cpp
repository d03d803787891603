// epoch_clock: a member's clock, epoch and step in it, and the epoch's tally.
#include "core/epoch_clock.hpp"

#include <algorithm>

namespace troupe {

epoch_clock::epoch_clock(std::int64_t steps_per_epoch, std::int32_t epochs, std::int64_t clock)
    : steps_per_epoch_(std::max<std::int64_t>(1, steps_per_epoch)), epochs_(epochs), clock_(clock) {}

bool epoch_clock::start(steady::time_point now) {
  epoch_ = static_cast<std::int32_t>(clock_ / steps_per_epoch_);
  if (job_over()) return false;
  begin_epoch(clock_ % steps_per_epoch_, now);
  return true;
}

void epoch_clock::begin_epoch(std::int64_t first_step, steady::time_point now) {
  step_in_epoch_ = first_step;
  tally_ = epoch_tally{.epoch = epoch_};
  start_ = now;
}

void epoch_clock::step_done(double loss, std::int64_t samples) {
  tally_.loss += loss;
  tally_.samples += samples;
  ++tally_.steps;
  skip_step();
}

void epoch_clock::skip_step() {
  ++clock_;
  ++step_in_epoch_;
}

epoch_tally epoch_clock::close_epoch(steady::time_point now) {
  epoch_tally t = tally_;
  t.seconds = std::chrono::duration<double>(now - start_).count();
  ++epoch_;
  if (!job_over()) begin_epoch(0, now);
  return t;
}

}  // namespace troupe
