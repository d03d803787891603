// chance_watch: notices an evaluated epoch whose test accuracy is at chance while the
// training loss stayed finite (Note [Accuracy at chance]). Both the local trainer's
// command and a distributed job's ledger keep one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace troupe {

// Note [Accuracy at chance]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A step too large can kill every ReLU or scatter the weights without making the loss
// NaN: the run goes on, finite, and ends at chance, and no loss check sees it. An epoch
// whose test accuracy is at most 1.5 / classes while its training loss is finite is at
// chance. When an earlier epoch was above that, the run collapsed; otherwise it has not
// learned. The operator is told which, and what to change; the first such epoch goes in
// the result (accuracy_at_chance_epoch) so that scripts see it too.
class chance_watch {
 public:
  // Records evaluated epoch `epoch` (0-based); returns the operator's warning when it is
  // at chance for `classes` (at least 2) with a finite training loss, else nothing.
  std::optional<std::string> check(std::int32_t epoch, double test_accuracy, double train_loss, std::int64_t classes);

  // The first epoch (0-based) that was at chance, or -1.
  std::int32_t first_chance_epoch() const { return chance_epoch_; }

 private:
  double best_accuracy_ = -1.0;  // over the epochs checked so far
  std::int32_t best_epoch_ = -1, chance_epoch_ = -1;
};

}  // namespace troupe
