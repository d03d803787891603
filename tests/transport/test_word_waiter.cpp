// Tests for transport/word_waiter.cpp: a change of a watched word, made by this process or by
// another one through shared memory, calls on_change on the waiter's thread; an unwatched
// word is no longer reported; a change made before watch returns is not lost; at most
// max_words are watched; destruction stops the thread while it sleeps, and on_change may
// destroy its own waiter; await_change returns on a change, at once for a stale value,
// and false at its timeout.
#define BOOST_TEST_MODULE word_waiter
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/word_waiter.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// Counts on_change calls and lets a test wait for the next one, with a deadline.
struct calls {
  std::mutex mu;
  std::condition_variable cv;
  int n = 0;
  std::thread::id on;
  void hit() {
    std::lock_guard lock(mu);
    ++n;
    on = std::this_thread::get_id();
    cv.notify_all();
  }
  bool wait_beyond(int seen, std::chrono::milliseconds limit = 5s) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return n > seen; });
  }
  int count() {
    std::lock_guard lock(mu);
    return n;
  }
};

void bump(std::uint32_t* w) {
  std::atomic_ref<std::uint32_t>(*w).fetch_add(1, std::memory_order_release);
  ::syscall(SYS_futex, w, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_change_of_a_watched_word_is_reported_on_the_waiters_thread) {
  BOOST_REQUIRE_MESSAGE(word_waiter::supported(), "this kernel lacks futex_waitv");
  calls c;
  alignas(64) std::uint32_t a = 0, b = 0;
  word_waiter w([&] { c.hit(); });
  BOOST_TEST(w.watch(&a));
  BOOST_TEST(w.watch(&b));
  bump(&b);
  BOOST_TEST(c.wait_beyond(0));
  BOOST_TEST((c.on != std::this_thread::get_id()));
  const int after_b = c.count();
  bump(&a);
  BOOST_TEST(c.wait_beyond(after_b));
}

BOOST_AUTO_TEST_CASE(a_change_right_after_watch_is_not_lost) {
  calls c;
  alignas(64) std::uint32_t a = 7;
  word_waiter w([&] { c.hit(); });
  for (int round = 0; round < 50; ++round) {
    const int before = c.count();
    BOOST_REQUIRE(w.watch(&a));
    bump(&a);
    BOOST_REQUIRE(c.wait_beyond(before));
    w.unwatch(&a);
  }
}

BOOST_AUTO_TEST_CASE(an_unwatched_word_is_not_reported) {
  calls c;
  alignas(64) std::uint32_t a = 0;
  word_waiter w([&] { c.hit(); });
  BOOST_TEST(w.watch(&a));
  w.unwatch(&a);
  bump(&a);
  // Nothing is watched, so no call can come; a wrong report would come within the wait.
  BOOST_TEST(!c.wait_beyond(0, 300ms));
}

BOOST_AUTO_TEST_CASE(a_word_in_shared_memory_changed_by_another_process_is_reported) {
  calls c;
  auto* shared =
      static_cast<std::uint32_t*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  BOOST_REQUIRE(shared != MAP_FAILED);
  *shared = 0;
  {
    word_waiter w([&] { c.hit(); });
    BOOST_TEST(w.watch(shared));
    const pid_t child = ::fork();
    BOOST_REQUIRE(child >= 0);
    if (child == 0) {
      bump(shared);
      ::_exit(0);
    }
    BOOST_TEST(c.wait_beyond(0));
    int status = 0;
    ::waitpid(child, &status, 0);
    BOOST_TEST(WIFEXITED(status));
    w.unwatch(shared);
  }
  ::munmap(shared, 4096);
}

BOOST_AUTO_TEST_CASE(at_most_max_words_are_watched) {
  word_waiter w([] {});
  std::vector<std::uint32_t> words(word_waiter::max_words + 1, 0);
  for (std::size_t i = 0; i < word_waiter::max_words; ++i) BOOST_REQUIRE(w.watch(&words[i]));
  BOOST_TEST(!w.watch(&words.back()));
  BOOST_TEST(w.watch(&words[0]));  // watching a word again is no new one
}

BOOST_AUTO_TEST_CASE(destruction_stops_a_sleeping_waiter_at_once) {
  alignas(64) std::uint32_t a = 0;
  const auto t0 = std::chrono::steady_clock::now();
  {
    word_waiter w([] {});
    w.watch(&a);
    std::this_thread::sleep_for(50ms);
  }
  // The waiter's own timed sleep is 1 s; destruction must not wait for it.
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 900ms));
}

// An actor run on the waiter's thread (Note [Nudging inline]) may unwatch its words and
// end, destroying its waiter from inside on_change: the thread ends once on_change returns.
BOOST_AUTO_TEST_CASE(on_change_may_unwatch_and_destroy_its_own_waiter) {
  BOOST_REQUIRE_MESSAGE(word_waiter::supported(), "this kernel lacks futex_waitv");
  alignas(64) std::uint32_t a = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::unique_ptr<word_waiter> w;
  bool destroyed = false;
  std::thread::id destroyed_on;
  {
    std::lock_guard lock(mu);
    w = std::make_unique<word_waiter>([&] {
      std::unique_ptr<word_waiter> mine;
      {
        std::lock_guard lock(mu);
        mine = std::move(w);
      }
      if (!mine) return;
      mine->unwatch(&a);
      mine.reset();  // destroys the waiter on its own thread
      std::lock_guard lock(mu);
      destroyed = true;
      destroyed_on = std::this_thread::get_id();
      cv.notify_all();
    });
    BOOST_REQUIRE(w->watch(&a));
  }
  bump(&a);
  std::unique_lock lock(mu);
  BOOST_TEST(cv.wait_for(lock, 5s, [&] { return destroyed; }));
  BOOST_TEST((destroyed_on != std::this_thread::get_id()));
  BOOST_TEST(!w);
}

BOOST_AUTO_TEST_CASE(await_change_returns_on_a_change_at_once_when_stale_and_times_out) {
  BOOST_REQUIRE_MESSAGE(word_waiter::supported(), "this kernel lacks futex_waitv");
  using steady = std::chrono::steady_clock;
  alignas(64) std::uint32_t a = 0, b = 5;
  const std::vector<std::pair<std::uint32_t*, std::uint32_t>> seen{{&a, 0}, {&b, 5}};
  // Nothing changes: it sleeps out its time and says so.
  auto start = steady::now();
  BOOST_TEST(!word_waiter::await_change(seen, 50ms));
  BOOST_TEST((steady::now() - start >= 45ms));
  // A value that already differs from the one named returns at once.
  const std::vector<std::pair<std::uint32_t*, std::uint32_t>> stale{{&a, 0}, {&b, 4}};
  start = steady::now();
  BOOST_TEST(word_waiter::await_change(stale, 5s));
  BOOST_TEST((steady::now() - start < 1s));
  // A change made by another thread while it sleeps wakes it.
  std::thread other([&] {
    std::this_thread::sleep_for(50ms);
    bump(&b);
  });
  start = steady::now();
  BOOST_TEST(word_waiter::await_change(seen, 10s));
  BOOST_TEST((steady::now() - start < 5s));
  other.join();
  BOOST_TEST(!word_waiter::await_change({}, 1ms));  // no words: nothing to wait for
}
