// word_waiter: one thread of its own that sleeps until any of a set of 32-bit words, which
// may lie in memory shared with other processes, changes from the value it last saw, and
// then calls `on_change` (the doorbells' waiter: Note [Doorbells] in transport/doorbell.hpp);
// and a wait on such words on the caller's own thread.
// Linux's futex_waitv waits on all of them at once; where the kernel lacks it (before
// 5.16), supported() is false and nothing should be watched.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>

namespace troupe {

class word_waiter {
 public:
  // The most words one waiter watches (futex_waitv's limit, less its own stop word).
  static constexpr std::size_t max_words = 127;

  // `on_change` runs on the waiter's thread, after one or more watched words changed; it
  // may run an actor there (Note [Nudging inline] in actors/inline_nudge.hpp), which may
  // watch, unwatch and destroy this waiter.
  explicit word_waiter(std::function<void()> on_change);
  // Stops the thread and waits for it; called from `on_change` itself, it lets the thread
  // end once `on_change` returns.
  ~word_waiter();
  word_waiter(const word_waiter&) = delete;
  word_waiter& operator=(const word_waiter&) = delete;

  // Whether this kernel has futex_waitv (asked once).
  static bool supported();

  // Watches `word` (4-byte aligned, in memory that stays mapped until unwatch returns);
  // false when max_words are watched already. A change since the call is reported.
  bool watch(std::uint32_t* word);
  // Stops watching `word`; once it returns the thread no longer reads it.
  void unwatch(const std::uint32_t* word);

  // Sleeps on the calling thread until any of `words` no longer holds the value paired
  // with it, or `within` has passed; true unless it timed out (a changed value, a wake or
  // a signal). At most max_words words. Needs supported().
  static bool await_change(std::span<const std::pair<std::uint32_t*, std::uint32_t>> words,
                           std::chrono::microseconds within);

 private:
  // What the thread reads, which it keeps alive for as long as it runs.
  struct watch_list {
    std::function<void()> on_change;
    std::mutex mu;
    std::map<std::uint32_t*, std::uint32_t, std::less<>> words;  // each word, and the value last seen
    std::uint32_t control = 0;                                   // changed (and woken) to make the thread look again
    bool stopping = false;
  };
  static void run(const std::shared_ptr<watch_list>& list);
  void poke();  // under list_->mu: makes the thread look again
  std::shared_ptr<watch_list> list_;
  std::thread thread_;
};

}  // namespace troupe
