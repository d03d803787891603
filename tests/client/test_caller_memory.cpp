// Tests for client/caller_memory: uses of the caller's arrays enter and leave, a revoke
// waits for the use in progress and refuses every later one.
#define BOOST_TEST_MODULE caller_memory
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "client/caller_memory.hpp"

using namespace troupe::kv;

BOOST_AUTO_TEST_CASE(uses_enter_until_a_revoke_and_none_after_it) {
  caller_memory m;
  BOOST_TEST(m.enter());
  BOOST_TEST(m.enter());
  m.leave();
  m.leave();
  BOOST_TEST(!m.revoked());
  m.revoke();  // nobody inside: at once
  BOOST_TEST(m.revoked());
  BOOST_TEST(!m.enter());
}

BOOST_AUTO_TEST_CASE(a_revoke_waits_for_the_use_in_progress) {
  auto m = std::make_shared<caller_memory>();
  std::atomic<bool> left{false};
  auto use = std::make_unique<caller_memory_use>(m);
  BOOST_TEST(static_cast<bool>(*use));
  auto revoking = std::async(std::launch::async, [&] {
    m->revoke();
    return left.load();
  });
  BOOST_TEST((revoking.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout));
  BOOST_TEST(!caller_memory_use(m));  // revoking: a new use is refused already
  left = true;
  use.reset();
  BOOST_TEST((revoking.wait_for(std::chrono::seconds(10)) == std::future_status::ready));
  BOOST_TEST(revoking.get());  // it returned only after the use left
}

BOOST_AUTO_TEST_CASE(a_use_without_a_gate_always_goes_ahead) {
  BOOST_TEST(static_cast<bool>(caller_memory_use(nullptr)));
}
