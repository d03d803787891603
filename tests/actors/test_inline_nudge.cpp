// Tests for actors/inline_nudge.hpp (Note [Nudging inline]): an idle actor nudged from a
// thread of ours runs there, before nudge returns; a busy actor finds the nudge in its
// mailbox and handles it on its scheduler thread; an actor it wakes in turn runs on the
// scheduler; an actor that ends while it runs inline ends cleanly.
#define BOOST_TEST_MODULE inline_nudge
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "actors/inline_nudge.hpp"
#include "tests/support/caf_fixture.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

// Where and how often a handler ran.
struct ran_on {
  std::mutex mu;
  std::thread::id thread;
  int times = 0;
  void mark() {
    std::lock_guard lock(mu);
    thread = std::this_thread::get_id();
    ++times;
  }
  std::pair<std::thread::id, int> seen() {
    std::lock_guard lock(mu);
    return {thread, times};
  }
};

// Waits (boundedly) until the actor has answered a request, so it is idle after it.
void settle(caf::actor_system& sys, const caf::actor& a) {
  caf::scoped_actor self{sys};
  bool answered = false;
  self->request(a, 5s, std::string("ping")).receive([&](const std::string&) { answered = true; }, [](caf::error&) {});
  BOOST_REQUIRE(answered);
  std::this_thread::sleep_for(20ms);  // it blocks its mailbox right after answering
}

// Nudges `a` with 1 from a new thread until one nudge ran there (an actor that had not yet
// blocked its mailbox takes it on its scheduler thread instead); the nudging thread's id.
std::thread::id nudge_from_a_thread(caf::actor_system& sys, const caf::actor& a, ran_on& r) {
  std::thread::id mine;
  std::thread t([&] {
    mine = std::this_thread::get_id();
    inline_unit unit(sys);
    for (int attempt = 0; attempt < 20; ++attempt) {
      unit.nudge(caf::actor_cast<caf::strong_actor_ptr>(a), 1);
      if (r.seen().first == mine) return;
      std::this_thread::sleep_for(10ms);
    }
  });
  t.join();
  return mine;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_idle_actor_nudged_from_our_thread_runs_there_before_nudge_returns) {
  threaded_system s;
  ran_on r;
  auto a = s.sys->spawn([&r]() -> caf::behavior {
    return {[&r](int) { r.mark(); }, [](const std::string& x) { return x; }};
  });
  settle(*s.sys, a);
  const std::thread::id mine = nudge_from_a_thread(*s.sys, a, r);
  BOOST_TEST((r.seen().first == mine));
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_busy_actor_finds_the_nudge_in_its_mailbox_and_handles_it_on_its_own_thread) {
  threaded_system s;
  ran_on r;
  std::promise<void> release;
  auto released = release.get_future().share();
  std::promise<void> busy;
  auto a = s.sys->spawn([&r, &busy, released]() -> caf::behavior {
    return {[&r](int) { r.mark(); },
            [&busy, released](caf::atom_value) {
              busy.set_value();
              released.wait_for(10s);  // holds its scheduler thread
            }};
  });
  caf::anon_send(a, caf::atom("block"));
  BOOST_REQUIRE(busy.get_future().wait_for(5s) == std::future_status::ready);
  std::thread::id mine;
  std::thread t([&] {
    mine = std::this_thread::get_id();
    inline_unit(*s.sys).nudge(caf::actor_cast<caf::strong_actor_ptr>(a), 1);
  });
  t.join();  // nudge returned without running the handler
  BOOST_TEST(r.seen().second == 0);
  release.set_value();
  for (int i = 0; i < 500 && r.seen().second == 0; ++i) std::this_thread::sleep_for(10ms);
  BOOST_TEST(r.seen().second == 1);
  BOOST_TEST((r.seen().first != mine));
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(an_actor_woken_by_one_that_runs_inline_runs_on_the_scheduler) {
  threaded_system s;
  ran_on first, second;
  auto b = s.sys->spawn([&second]() -> caf::behavior {
    return {[&second](int) { second.mark(); }, [](const std::string& x) { return x; }};
  });
  auto a = s.sys->spawn([&first, b](caf::event_based_actor* self) -> caf::behavior {
    return {[self, &first, b](int) {
              first.mark();
              self->send(b, 2);
            },
            [](const std::string& x) { return x; }};
  });
  settle(*s.sys, b);
  settle(*s.sys, a);
  const std::thread::id mine = nudge_from_a_thread(*s.sys, a, first);
  BOOST_TEST((first.seen().first == mine));
  for (int i = 0; i < 500 && second.seen().second == 0; ++i) std::this_thread::sleep_for(10ms);
  BOOST_REQUIRE(second.seen().second >= 1);
  BOOST_TEST((second.seen().first != mine));
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(an_actor_that_ends_while_it_runs_inline_ends_cleanly) {
  threaded_system s;
  ran_on r;
  auto a = s.sys->spawn([&r](caf::event_based_actor* self) -> caf::behavior {
    return {[self, &r](int) {
              r.mark();
              self->quit();
            },
            [](const std::string& x) { return x; }};
  });
  settle(*s.sys, a);
  caf::scoped_actor watcher{*s.sys};
  watcher->monitor(a);
  const std::thread::id mine = nudge_from_a_thread(*s.sys, a, r);
  BOOST_TEST((r.seen().first == mine));
  bool down = false;
  watcher->receive([&](const caf::down_msg& m) { down = m.source == a; }, caf::after(5s) >> [] {});
  BOOST_TEST(down);
}
