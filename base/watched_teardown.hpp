// watched_teardown: runs a teardown that should take milliseconds on the calling thread,
// with a watcher thread that says so once it is slow and, past a limit, acts for it: the
// shape of a node's teardown (Note [A node's teardown] in net/node_system.cpp), kept apart so the
// watching itself is tested.
#pragma once

#include <chrono>
#include <functional>

namespace troupe {

struct teardown_limits {
  std::chrono::milliseconds warn_after{3000};
  std::chrono::milliseconds leave_after{8000};  // from the start, not from the warning
};

// Runs `teardown` and returns once it has returned. If it is not over after
// limits.warn_after, `warn` runs once on the watcher's thread; if it is still not over
// after limits.leave_after, `leave` runs there too (when set). A `leave` that ends the
// process never returns; one that returns lets the teardown go on.
void watched_teardown(const std::function<void()>& teardown, const teardown_limits& limits,
                      const std::function<void()>& warn, const std::function<void()>& leave);

}  // namespace troupe
