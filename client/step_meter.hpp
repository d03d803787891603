// step_meter: where a user's loop's steps end and how long it computed in each (Note
// [Steps of a user's loop]), for the step reports from which the coordinator names
// stragglers and the dashboard shows the members' clocks. Not thread-safe: the store
// calls it under its lock.
//
// Note [Steps of a user's loop]
// The coordinator names a straggler by the time a member computes per step, not by its
// step rate, which waiting for others evens out (Note [Naming stragglers] in
// core/job_stragglers.cpp). A user's loop says neither where its steps begin and end nor
// what of its time is compute, so the store measures both from what it sees:
//   - a step ends where the loop pushes a key it already pushed since the last step
//     ended, for a loop pushes each of its keys once a step (MXNet's Module and
//     troupe.torch do); a loop that pushes some keys only every other step ends a step
//     at each repeat, and every member that runs the same loop reports alike, which is
//     what the comparison needs;
//   - its compute is the step's wall time less the time the caller spent blocked in the
//     store (wait, wait_all, barrier, the collectives): the pushes and pulls in flight
//     while the loop computes are not waiting, and a member held by the ssp bound or by
//     a sync round waits in the store, not in its compute.
// The first step runs from the loop's first push.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace troupe::kv {

class step_meter {
 public:
  using clock = std::chrono::steady_clock;
  struct step {
    std::int64_t number = 0;   // steps ended so far, this one included
    double busy_seconds = 0.0; // its wall time less the time blocked in the store
  };
  // A push of `keys` at `now`: the step it ended, if it pushes a key again.
  std::optional<step> pushed(const std::vector<std::string>& keys, clock::time_point now);
  // The caller was blocked in the store for `d`.
  void blocked(clock::duration d) { blocked_ += d; }

 private:
  std::set<std::string> this_step_;
  std::optional<clock::time_point> began_;
  clock::duration blocked_{};
  std::int64_t steps_ = 0;
};

}  // namespace troupe::kv
