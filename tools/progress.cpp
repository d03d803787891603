// progress_printer: throttled in-place line on a TTY, one line per epoch always.
#include "tools/progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "tools/text_report.hpp"

namespace troupe::cli {

progress_printer::progress_printer(int epochs, bool interactive) : epochs_(epochs), interactive_(interactive) {}

bool progress_printer::stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

void progress_printer::on_step(const step_progress& p) {
  if (!interactive_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = p.step_in_epoch == p.steps_per_epoch;
  if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double rate = p.seconds > 0 ? static_cast<double>(p.samples_done) / p.seconds : 0.0;
  const double done = static_cast<double>(p.epoch * p.steps_per_epoch + p.step_in_epoch);
  const double total = static_cast<double>(epochs_ * p.steps_per_epoch);
  const double eta = done > 0 ? p.seconds * (total - done) / done : 0.0;
  std::fprintf(stderr, "\r\033[Kepoch %d/%d %3.0f%%  %.0f samples/s  loss %.4f  ETA %s", p.epoch + 1, epochs_,
               100.0 * static_cast<double>(p.step_in_epoch) / static_cast<double>(p.steps_per_epoch), rate, p.loss,
               format_duration(eta).c_str());
  std::fflush(stderr);
  line_open_ = true;
}

void progress_printer::on_epoch(const epoch_report& r) {
  if (line_open_) std::fputs("\r\033[K", stderr);
  line_open_ = false;
  std::fprintf(stderr, "epoch %d/%d: train loss %.4f, %.0f samples/s, %.2f s, lr %.4g, test accuracy %.2f%% (loss %.4f)\n",
               r.epoch + 1, epochs_, r.train_loss, r.samples_per_second, r.epoch_seconds, r.lr,
               100.0 * r.test_accuracy, r.test_loss);
  if (per_character_) std::fprintf(stderr, "  validation: %.3f bits per character\n", bits_per_char(r.test_loss));
  std::fflush(stderr);
}

}  // namespace troupe::cli
