// Pipeline schedules: for stage `stage` of K and M microbatches, the order of its forward
// and backward actions within one minibatch. A stage follows its list; a message that
// arrives before its action is due waits, so arrival order never changes the math.
//   gpipe: all M forwards, then all M backwards; every stage holds M activations.
//   1f1b:  min(K - stage - 1, M) warm-up forwards, then forward/backward pairs, then the
//          remaining backwards; stage i never holds more than K - i activations.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/expected.hpp"

namespace troupe {

enum class pipeline_schedule : std::uint8_t { gpipe = 0, one_f_one_b = 1 };
expected<pipeline_schedule> parse_pipeline_schedule(std::string_view name);
std::string_view name_of(pipeline_schedule s);

struct pipeline_action {
  bool forward = true;
  int microbatch = 0;
  friend bool operator==(const pipeline_action&, const pipeline_action&) = default;
};

std::vector<pipeline_action> stage_actions(pipeline_schedule s, int stages, int stage, int microbatches);

// Most activations the stage holds at once when it follows its actions (forward stores,
// backward frees).
int peak_stored(const std::vector<pipeline_action>& actions);

// (K - 1) / (M + K - 1): the idle share of a pipeline with equal stage times.
double theoretical_bubble(int stages, int microbatches);

}  // namespace troupe
