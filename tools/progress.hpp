// Progress output for training commands, on stderr. On a terminal, one line redrawn in
// place (epoch, percent, samples/s, loss, ETA) at most ten times a second; otherwise, and
// at the end of every epoch on a terminal too, plain lines a log file can keep.
#pragma once

#include <chrono>
#include <string>

#include "train/trainer.hpp"

namespace troupe::cli {

class progress_printer {
 public:
  progress_printer(int epochs, bool interactive);
  static bool stderr_is_terminal();

  void on_step(const step_progress& p);
  void on_epoch(const epoch_report& r);
  // A language model's epochs report the validation loss in bits per character too.
  void per_character(bool on) { per_character_ = on; }

 private:
  int epochs_;
  bool interactive_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool line_open_ = false;
  bool per_character_ = false;
};

// "1m05s", "12s"
std::string format_duration(double seconds);

}  // namespace troupe::cli
