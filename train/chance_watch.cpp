// An accuracy at chance with a finite loss, and the operator's warning about it.
#include "train/chance_watch.hpp"

#include <cmath>
#include <cstdio>

namespace troupe {

std::optional<std::string> chance_watch::check(std::int32_t epoch, double test_accuracy, double train_loss,
                                               std::int64_t classes) {
  if (classes < 2) return std::nullopt;
  const double best = best_accuracy_;
  const std::int32_t best_epoch = best_epoch_;
  if (test_accuracy > best_accuracy_) {
    best_accuracy_ = test_accuracy;
    best_epoch_ = epoch;
  }
  const double chance = 1.0 / static_cast<double>(classes);
  if (test_accuracy > 1.5 * chance || !std::isfinite(train_loss)) return std::nullopt;
  if (chance_epoch_ < 0) chance_epoch_ = epoch;
  char head[160];
  std::snprintf(
      head, sizeof head,
      "epoch %d: test accuracy %.2f%% is chance for %lld classes while the training loss stayed finite (%.4f)",
      epoch + 1, 100.0 * test_accuracy, static_cast<long long>(classes), train_loss);
  std::string out = head;
  if (best > 1.5 * chance) {
    char was[96];
    std::snprintf(was, sizeof was, ": the run collapsed (it reached %.2f%% at epoch %d)", 100.0 * best, best_epoch + 1);
    out += was;
  } else {
    out += ": the run has not learned";
  }
  return out + "; a step too large kills ReLUs or scatters the weights: lower --lr or lengthen --warmup-epochs";
}

}  // namespace troupe
