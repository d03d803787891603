// watched_teardown: the watcher thread waits on a future that the teardown's end sets.
#include "base/watched_teardown.hpp"

#include <future>
#include <memory>
#include <thread>

namespace troupe {

void watched_teardown(const std::function<void()>& teardown, const teardown_limits& limits,
                      const std::function<void()>& warn, const std::function<void()>& leave) {
  auto over = std::make_shared<std::promise<void>>();
  std::thread watcher([&, done = over->get_future()] {
    if (done.wait_for(limits.warn_after) != std::future_status::timeout) return;
    if (warn) warn();
    if (!leave || done.wait_for(limits.leave_after - limits.warn_after) != std::future_status::timeout) return;
    leave();
  });
  teardown();
  over->set_value();
  watcher.join();
}

}  // namespace troupe
