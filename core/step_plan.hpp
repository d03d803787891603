// step_plan: one training step of a member as its core runs it (member_step.cpp): the
// schedule's actions for the step's microbatches and how far they got, each microbatch's
// activation slot, the forward in progress while layer-by-layer pulls arrive, the
// bucketed last backward's progress (Note [Gradient buckets]), and what the step reports:
// its loss, compute seconds and timestamps. The core decides; this holds what one step
// decided, so that nothing of a step outlives it by accident (start() resets all but
// `begin`, which the step's pulls set before it starts).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/pipeline_schedule.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

struct step_plan {
  using wall = std::chrono::system_clock;

  // A new step at `clock` of `batch` rows in `parts` microbatches, with this stage's
  // actions for them; its parameters were ready at `now`.
  void start(std::int64_t at_clock, std::int64_t rows, int microbatches, std::vector<pipeline_action> acts,
             wall::time_point now);
  // Whether an action is left to run, which one, and whether it is the step's last.
  bool has_action() const { return running && next < actions.size(); }
  const pipeline_action& action() const { return actions[next]; }
  bool at_last_action() const { return next + 1 == actions.size(); }

  // A forward or backward's compute from t0 to t1.
  void computed(bool forward, wall::time_point t0, wall::time_point t1);

  bool running = false;      // between start and finish
  std::int64_t clock = -1;   // the clock whose actions these are
  std::int64_t batch = 0;    // the step's rows
  int parts = 0;             // its microbatches
  std::vector<pipeline_action> actions;
  std::size_t next = 0;      // the next action to run
  std::vector<int> slot_of;  // each microbatch's activation slot (-1 before its forward)
  bool forward_open = false;  // a forward runs layer by layer as the parameters arrive
  // The last backward in gradient buckets: the buckets done so far, the activation
  // gradient it began with, and whether the step's gradient went out with them.
  std::size_t bucket_next = 0;
  tensor backward_in;
  bool pushed = false;
  // What the step reports: its loss (the last stage's), compute seconds in all and per
  // direction, and when it began (its pulls went out), its parameters were ready, its
  // first forward began, the open forward and the bucketed backward began, and its
  // actions ended.
  double loss = 0.0, busy = 0.0, forward_s = 0.0, backward_s = 0.0;
  wall::time_point begin, params_ready, forward_begin, backward_begin, window_end;
  std::optional<wall::time_point> first_action;
};

}  // namespace troupe
