// checkpoint_steps: which steps a checkpoint is taken at (Note [Checkpoint steps] in
// core/shard_core_checkpoints.cpp): the multiples of --checkpoint-every, every epoch's end,
// and the steps the coordinator asks for (--checkpoint-seconds), each at most once and
// never one at or before the last taken. CAF-free. A shard (core/shard_core.hpp) asks it
// whenever the step its state has reached moves, and a member that writes checkpoints or
// 2-bit residuals (core/member_checkpoint.cpp) once per step; each then takes the image.
#pragma once

#include <cstdint>
#include <optional>
#include <set>

namespace troupe {

class checkpoint_steps {
 public:
  checkpoint_steps() = default;
  // every: --checkpoint-every; epoch_steps: the steps of an epoch (0 for either: not by it).
  checkpoint_steps(std::int64_t every, std::int64_t epoch_steps);

  // The coordinator asks for a checkpoint at `step`; one at or before the last taken is
  // not held.
  void request(std::int64_t step);
  // The state has reached step `now`: the latest step due in (the last taken, now],
  // taken now and never again, or none. Requests at or before `now` are spent.
  std::optional<std::int64_t> take_due(std::int64_t now);
  // `step` was taken another way (a resumed job starts at its checkpoint's step; a shard
  // that has nothing to wait for takes a requested step at once).
  void taken(std::int64_t step) { last_ = step; }

  std::int64_t last() const { return last_; }
  // Whether any step can ever be due (a rule, or a request held).
  bool any() const { return every_ > 0 || epoch_steps_ > 0 || !requested_.empty(); }

 private:
  std::int64_t every_ = 0, epoch_steps_ = 0;
  std::int64_t last_ = 0;
  std::set<std::int64_t> requested_;
};

}  // namespace troupe
