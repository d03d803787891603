// serial_worker: one thread of its own that runs tasks one at a time, in the order they
// were posted, so slow work (writing a checkpoint) leaves the caller's thread free. At
// most `capacity` tasks wait behind the running one; post() refuses more, so a caller
// that produces faster than the work drains learns it at once instead of piling memory
// up. Destruction waits for the running task and drops the waiting ones.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace troupe {

class serial_worker {
 public:
  explicit serial_worker(std::size_t capacity);
  ~serial_worker();
  serial_worker(const serial_worker&) = delete;
  serial_worker& operator=(const serial_worker&) = delete;

  // Queues the task; false (and the task is dropped) when `capacity` tasks already wait.
  bool post(std::function<void()> task);
  // Tasks waiting or running.
  std::size_t pending() const;
  // Tasks that may wait behind the running one.
  std::size_t capacity() const { return capacity_; }

 private:
  // Shared with the thread, which may outlive this object (see the destructor).
  struct queue {
    std::mutex mu;
    std::condition_variable wake;
    std::deque<std::function<void()>> waiting;
    bool running = false, stopping = false;
  };
  static void run(const std::shared_ptr<queue>& q);

  const std::size_t capacity_;
  std::shared_ptr<queue> q_;
  std::thread thread_;
};

}  // namespace troupe
