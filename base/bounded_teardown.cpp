// bounded_teardown: the teardown thread and the deadline (bounded_teardown.hpp).
#include "base/bounded_teardown.hpp"

#include <future>
#include <thread>

namespace troupe {

bool bounded_teardown(std::function<void()> teardown, std::chrono::milliseconds deadline) {
  std::packaged_task<void()> task(std::move(teardown));
  auto done = task.get_future();
  std::thread(std::move(task)).detach();
  return done.wait_for(deadline) == std::future_status::ready;
}

}  // namespace troupe
