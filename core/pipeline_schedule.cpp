// The two schedules.
#include "core/pipeline_schedule.hpp"

#include <algorithm>

#include "base/enum_names.hpp"

namespace troupe {

// pipeline_schedule's names, for its parse and name_of.
constexpr std::array<enum_name<pipeline_schedule>, 2> pipeline_schedules{{
    {pipeline_schedule::gpipe, "gpipe"},
    {pipeline_schedule::one_f_one_b, "1f1b"},
}};

expected<pipeline_schedule> parse_pipeline_schedule(std::string_view name) {
  return parse_in(pipeline_schedules, name, "schedule");
}

std::string_view name_of(pipeline_schedule x) { return name_in(pipeline_schedules, x); }

std::vector<pipeline_action> stage_actions(pipeline_schedule s, int stages, int stage, int microbatches) {
  std::vector<pipeline_action> out;
  const int m = microbatches;
  if (s == pipeline_schedule::gpipe) {
    for (int i = 0; i < m; ++i) out.push_back({true, i});
    for (int i = 0; i < m; ++i) out.push_back({false, i});
    return out;
  }
  const int warmup = std::min(stages - stage - 1, m);
  for (int i = 0; i < warmup; ++i) out.push_back({true, i});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({true, warmup + i});
    out.push_back({false, i});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({false, i});
  return out;
}

int peak_stored(const std::vector<pipeline_action>& actions) {
  int now = 0, peak = 0;
  for (const auto& a : actions) {
    now += a.forward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

double theoretical_bubble(int stages, int microbatches) {
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

}  // namespace troupe
