// bubble_meter: the pipeline bubble measured from the stages' step reports, per epoch and
// over the whole job (Note [Measuring the bubble] in bubble_meter.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "core/messages.hpp"

namespace troupe {

class bubble_meter {
 public:
  explicit bubble_meter(std::uint32_t stages) : stages_(stages) {}

  // One stage's report of one step; member rank = replica * stages + stage.
  void note(const step_report& r);
  // The share of stage time no stage spent computing, over epoch e or the whole job
  // (0 before any replica has reported a whole step).
  double fraction(std::int32_t epoch) const;
  double fraction() const { return all_.fraction(); }

 private:
  struct step_window {
    std::uint32_t reports = 0;
    double busy = 0.0;
    std::int64_t begin_us = 0, end_us = 0;  // stage 0's
  };
  struct total {
    double busy = 0.0, capacity = 0.0;  // stage-seconds
    double fraction() const { return capacity > 0 ? 1.0 - busy / capacity : 0.0; }
  };
  std::uint32_t stages_;
  std::map<std::pair<std::uint32_t, std::int64_t>, step_window> windows_;  // (replica, clock)
  std::map<std::int32_t, total> epochs_;
  total all_;
};

}  // namespace troupe
