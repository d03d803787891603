// step_meter: a user's loop's steps (Note [Steps of a user's loop]).
#include "client/step_meter.hpp"

#include <algorithm>

namespace troupe::kv {

std::optional<step_meter::step> step_meter::pushed(const std::vector<std::string>& keys, clock::time_point now) {
  std::optional<step> ended;
  if (!began_) {
    began_ = now;
    blocked_ = {};
  } else if (std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return this_step_.count(k) > 0; })) {
    const auto busy = std::max(clock::duration::zero(), now - *began_ - blocked_);
    ended = step{++steps_, std::chrono::duration<double>(busy).count()};
    this_step_.clear();
    began_ = now;
    blocked_ = {};
  }
  this_step_.insert(keys.begin(), keys.end());
  return ended;
}

}  // namespace troupe::kv
