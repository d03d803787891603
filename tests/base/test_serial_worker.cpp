// Tests for base/serial_worker.cpp: tasks run one at a time in the order posted, on a
// thread that is not the caller's; a post beyond the capacity is refused while the work
// is busy; destruction waits for the running task and drops the waiting ones.
#define BOOST_TEST_MODULE serial_worker
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "base/serial_worker.hpp"

using namespace troupe;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(tasks_run_in_order_off_the_callers_thread) {
  std::mutex mu;
  std::vector<int> order;
  std::promise<std::thread::id> ran_on;
  {
    serial_worker w(16);
    BOOST_TEST(w.post([&] { ran_on.set_value(std::this_thread::get_id()); }));
    for (int i = 0; i < 10; ++i)
      BOOST_TEST(w.post([&, i] {
        std::lock_guard lock(mu);
        order.push_back(i);
      }));
    auto id = ran_on.get_future();
    BOOST_REQUIRE(id.wait_for(10s) == std::future_status::ready);
    BOOST_TEST((id.get() != std::this_thread::get_id()));
    for (int spin = 0; spin < 1000 && w.pending() > 0; ++spin) std::this_thread::sleep_for(10ms);
    BOOST_TEST(w.pending() == 0u);
  }
  BOOST_TEST(order == (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_post_beyond_the_capacity_is_refused_and_destruction_drops_the_waiting) {
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::promise<void> started;
  std::atomic<int> ran{0};
  std::thread opener;
  {
    serial_worker w(1);
    BOOST_TEST(w.post([&, gate] {
      started.set_value();
      gate.wait();
      ++ran;
    }));
    BOOST_REQUIRE(started.get_future().wait_for(10s) == std::future_status::ready);
    BOOST_TEST(w.post([&] { ++ran; }));   // waits behind the running one
    BOOST_TEST(!w.post([&] { ++ran; }));  // one already waits
    BOOST_TEST(w.pending() == 2u);
    opener = std::thread([&] {
      std::this_thread::sleep_for(50ms);
      release.set_value();
    });
  }  // waits for the running task; the waiting one is dropped or has run
  opener.join();
  BOOST_TEST(ran.load() >= 1);
  BOOST_TEST(ran.load() <= 2);
}
