// Tests for client/heap_returner.cpp (Note [Returning the heap]): the first call trims;
// calls within the interval do not, from any thread; one after it does again.
#define BOOST_TEST_MODULE heap_returner
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "client/heap_returner.hpp"

using namespace troupe::kv;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(it_trims_at_most_once_per_interval) {
  heap_returner h(1h);
  BOOST_TEST(h.maybe_trim());
  BOOST_TEST(!h.maybe_trim());
  std::atomic<int> trimmed{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i)
    callers.emplace_back([&] {
      for (int k = 0; k < 100; ++k) trimmed += h.maybe_trim();
    });
  for (auto& t : callers) t.join();
  BOOST_TEST(trimmed.load() == 0);
}

BOOST_AUTO_TEST_CASE(it_trims_again_once_the_interval_has_passed) {
  heap_returner h(500ms);
  BOOST_TEST(h.maybe_trim());
  std::this_thread::sleep_for(600ms);
  BOOST_TEST(h.maybe_trim());
  BOOST_TEST(!h.maybe_trim());
}
