// epoch_clock: where a training member is in its job: its clock (the steps since the job
// began, the number every push, pull, ring collective and report carries), the epoch and
// the step within it, and what the epoch has tallied so far for its report (the steps
// computed, their loss and samples, and when it began). CAF-free; the member's core
// (core/member_core.hpp) owns one and moves it at each step's end, at a skipped round
// (Note [Backup workers] in core/shard_core.hpp) and at each epoch's end.
#pragma once

#include <chrono>
#include <cstdint>

namespace troupe {

// What an epoch tallied, for its report.
struct epoch_tally {
  std::int32_t epoch = 0;
  double loss = 0.0;          // the sum of its steps' losses
  std::int64_t steps = 0;     // computed in it (rounds skipped are not)
  std::int64_t samples = 0;   // trained in it
  double seconds = 0.0;       // from its start to its close
};

class epoch_clock {
 public:
  using steady = std::chrono::steady_clock;

  epoch_clock() = default;
  // A job of `epochs` epochs of `steps_per_epoch` steps each (at least 1), joined at
  // `clock` (0, or the step a member that replaces a dead one resumes at).
  epoch_clock(std::int64_t steps_per_epoch, std::int32_t epochs, std::int64_t clock);

  // Starts training at the clock: the epoch it falls in begins, at its step in that
  // epoch. False (and nothing begins) when the clock is past the job's last epoch.
  bool start(steady::time_point now);

  // A step was computed: its loss and samples are tallied, and the clock moves on.
  void step_done(double loss, std::int64_t samples);
  // A round closed without this member: its step is passed over, untallied.
  void skip_step();

  // Whether the current epoch has run all its steps.
  bool epoch_over() const { return step_in_epoch_ >= steps_per_epoch_; }
  // Closes the epoch that is over: its tally; the next epoch begins at its first step,
  // unless that was the job's last (job_over()).
  epoch_tally close_epoch(steady::time_point now);
  bool job_over() const { return epoch_ >= epochs_; }
  // Whether the step at the clock is the job's last.
  bool in_last_step() const { return epoch_ + 1 >= epochs_ && step_in_epoch_ + 1 >= steps_per_epoch_; }
  // Whether `step` (a clock) ends an epoch.
  bool ends_epoch(std::int64_t step) const { return step % steps_per_epoch_ == 0; }

  std::int64_t clock() const { return clock_; }
  std::int32_t epoch() const { return epoch_; }
  std::int64_t step_in_epoch() const { return step_in_epoch_; }

 private:
  // The current epoch begins afresh at step `first_step`, its tally empty.
  void begin_epoch(std::int64_t first_step, steady::time_point now);

  std::int64_t steps_per_epoch_ = 1;
  std::int32_t epochs_ = 0;
  std::int64_t clock_ = 0, step_in_epoch_ = 0;
  std::int32_t epoch_ = 0;
  epoch_tally tally_;
  steady::time_point start_;
};

}  // namespace troupe
