// word_waiter: futex_waitv over the watched words and a control word of its own.
#include "transport/word_waiter.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <vector>

namespace troupe {

namespace {

std::uint32_t load(std::uint32_t* w) { return std::atomic_ref<std::uint32_t>(*w).load(std::memory_order_acquire); }

long wait_any(struct futex_waitv* waiters, unsigned n, const timespec* deadline) {
  return ::syscall(SYS_futex_waitv, waiters, n, 0, deadline, CLOCK_MONOTONIC);
}

void wake_all(std::uint32_t* w) { ::syscall(SYS_futex, w, FUTEX_WAKE, 1 << 30, nullptr, nullptr, 0); }

}  // namespace

bool word_waiter::supported() {
  // An empty wait is refused with EINVAL where the call exists, ENOSYS where it does not.
  static const bool has = wait_any(nullptr, 0, nullptr) == -1 && errno != ENOSYS;
  return has;
}

word_waiter::word_waiter(std::function<void()> on_change) : list_(std::make_shared<watch_list>()) {
  list_->on_change = std::move(on_change);
  thread_ = std::thread([list = list_] { run(list); });
}

word_waiter::~word_waiter() {
  {
    std::lock_guard lock(list_->mu);
    list_->stopping = true;
    poke();
  }
  wake_all(&list_->control);
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();  // inside on_change: the thread stops once it returns, and frees the list
  else
    thread_.join();
}

void word_waiter::poke() { std::atomic_ref<std::uint32_t>(list_->control).fetch_add(1, std::memory_order_release); }

bool word_waiter::watch(std::uint32_t* word) {
  {
    std::lock_guard lock(list_->mu);
    if (!list_->words.contains(word) && list_->words.size() >= max_words) return false;
    // The value before any change the caller will make from now on: a change is reported.
    list_->words[word] = load(word);
    poke();
  }
  wake_all(&list_->control);
  return true;
}

void word_waiter::unwatch(const std::uint32_t* word) {
  {
    std::lock_guard lock(list_->mu);
    if (auto it = list_->words.find(word); it != list_->words.end()) list_->words.erase(it);
    poke();
  }
  // The thread reads words only under the lock, so it no longer reads this one. A wait it
  // sleeps in may still name the address; the kernel reads it then, and an unmapped word
  // only makes that wait fail (EFAULT), after which the thread looks again.
  wake_all(&list_->control);
}

bool word_waiter::await_change(std::span<const std::pair<std::uint32_t*, std::uint32_t>> words,
                               std::chrono::microseconds within) {
  if (words.empty() || words.size() > max_words) return false;
  std::vector<struct futex_waitv> waiters;
  waiters.reserve(words.size());
  for (const auto& [word, seen] : words) waiters.push_back({seen, reinterpret_cast<std::uintptr_t>(word), FUTEX_32, 0});
  timespec deadline{};
  ::clock_gettime(CLOCK_MONOTONIC, &deadline);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(within).count() + deadline.tv_nsec;
  deadline.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
  deadline.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return wait_any(waiters.data(), static_cast<unsigned>(waiters.size()), &deadline) != -1 || errno != ETIMEDOUT;
}

void word_waiter::run(const std::shared_ptr<watch_list>& list) {
  std::vector<struct futex_waitv> waiters;
  for (;;) {
    bool changed = false;
    {
      std::lock_guard lock(list->mu);
      if (list->stopping) return;
      waiters.clear();
      waiters.push_back({load(&list->control), reinterpret_cast<std::uintptr_t>(&list->control), FUTEX_32, 0});
      for (auto& [word, seen] : list->words) {
        const std::uint32_t now = load(word);
        if (now != seen) changed = true;
        seen = now;
        waiters.push_back({now, reinterpret_cast<std::uintptr_t>(word), FUTEX_32, 0});
      }
    }
    if (changed) {
      list->on_change();
      continue;
    }
    // A bounded sleep, so a lost wake-up (a writer that died between its count and its
    // wake) costs at most this long.
    timespec deadline{};
    ::clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += 1;
    wait_any(waiters.data(), static_cast<unsigned>(waiters.size()), &deadline);
  }
}

}  // namespace troupe
