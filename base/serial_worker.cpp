// serial_worker: the queue and its thread.
#include "base/serial_worker.hpp"

namespace troupe {

serial_worker::serial_worker(std::size_t capacity)
    : capacity_(capacity), q_(std::make_shared<queue>()), thread_([q = q_] { run(q); }) {}

serial_worker::~serial_worker() {
  {
    std::lock_guard lock(q_->mu);
    q_->stopping = true;
    q_->waiting.clear();
  }
  q_->wake.notify_all();
  // The last owner may let go from inside a task (one that kept its owner alive): the
  // thread then ends on its own once the task returns, holding the queue until then.
  if (std::this_thread::get_id() == thread_.get_id())
    thread_.detach();
  else
    thread_.join();
}

bool serial_worker::post(std::function<void()> task) {
  {
    std::lock_guard lock(q_->mu);
    if (q_->stopping || q_->waiting.size() >= capacity_) return false;
    q_->waiting.push_back(std::move(task));
  }
  q_->wake.notify_one();
  return true;
}

std::size_t serial_worker::pending() const {
  std::lock_guard lock(q_->mu);
  return q_->waiting.size() + (q_->running ? 1 : 0);
}

void serial_worker::run(const std::shared_ptr<queue>& q) {
  std::unique_lock lock(q->mu);
  for (;;) {
    q->wake.wait(lock, [&] { return q->stopping || !q->waiting.empty(); });
    if (q->stopping) return;
    auto task = std::move(q->waiting.front());
    q->waiting.pop_front();
    q->running = true;
    lock.unlock();
    task();
    task = nullptr;  // what it held goes before the next wait
    lock.lock();
    q->running = false;
  }
}

}  // namespace troupe
