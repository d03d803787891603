// Tests for client/kvstore_waits.cpp on in-process shards: a call that nobody answers in
// time is abandoned, its arrays given back to the caller (Note [Abandoned calls]) and its
// late answer written nowhere; wait_for gives up without abandoning; wait_all abandons
// everything in flight.
#define BOOST_TEST_MODULE kvstore_waits
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <vector>

#include "client/kvstore.hpp"
#include "tests/support/local_store.hpp"

using namespace troupe;
using kv::kvstore;
using test::contains;
using test::error_of;
using test::opts;

BOOST_AUTO_TEST_CASE(a_sync_pull_that_nobody_completes_times_out_and_a_closed_worker_unblocks_rounds) {
  auto o = opts("sync");
  o.timeout = std::chrono::milliseconds(200);
  auto group = kvstore::open_local_group(o, 2);
  std::vector<float> v(1, 0.f), g(1, 2.f), out(1);
  group[0]->init("w", {v.data(), {1}});
  group[0]->push({"w"}, {{g.data(), {1}}});
  auto h = group[0]->pull({"w"}, {{out.data(), {1}}});
  auto [code, msg] = error_of([&] { group[0]->wait(h); });
  BOOST_TEST(code == "timed_out");
  BOOST_TEST(contains(msg, "200 ms"));
  BOOST_TEST(contains(msg, "abandoned"));
  out[0] = -1.f;               // the array is the caller's again: Note [Abandoned calls]
  group[1]->close();           // the round closes without worker 1 and answers the held pull
  BOOST_TEST(out[0] == -1.f);  // into nothing
  std::vector<float> fresh(1);
  group[0]->wait(group[0]->pull({"w"}, {{fresh.data(), {1}}}));
  BOOST_TEST(fresh[0] == 2.f);
  BOOST_TEST(out[0] == -1.f);
  BOOST_TEST(error_of([&] { group[0]->wait(h); }).first == "no error");  // forgotten: nothing left to report
}

BOOST_AUTO_TEST_CASE(wait_for_gives_up_without_abandoning_and_wait_all_abandons_everything) {
  auto o = opts("sync");
  o.timeout = std::chrono::seconds(5);
  auto group = kvstore::open_local_group(o, 2);
  std::vector<float> v(1, 0.f), g(1, 2.f), a(1, -1.f), b(1, -1.f);
  group[0]->init("w", {v.data(), {1}});
  group[0]->push({"w"}, {{g.data(), {1}}});
  auto h = group[0]->pull({"w"}, {{a.data(), {1}}});
  BOOST_TEST(!group[0]->wait_for(h, std::chrono::milliseconds(50)));  // still in flight, still the store's
  group[1]->push({"w"}, {{g.data(), {1}}});
  group[0]->wait(h);
  BOOST_TEST(a[0] == 4.f);

  group[0]->push({"w"}, {{g.data(), {1}}});
  group[0]->pull({"w"}, {{a.data(), {1}}});
  group[0]->pull({"w"}, {{b.data(), {1}}});
  a[0] = b[0] = -1.f;
  auto [code, msg] = error_of([&] { group[0]->wait_all(std::chrono::milliseconds(100)); });
  BOOST_TEST(code == "timed_out");
  BOOST_TEST(contains(msg, "100 ms"));
  group[1]->push({"w"}, {{g.data(), {1}}});  // the round closes: both held pulls answer into nothing
  std::vector<float> fresh(1);
  group[0]->wait(group[0]->pull({"w"}, {{fresh.data(), {1}}}));
  BOOST_TEST(fresh[0] == 4.f);  // no server optimizer: the round's sum
  BOOST_TEST(a[0] == -1.f);
  BOOST_TEST(b[0] == -1.f);
  group[0]->wait_all();  // nothing in flight
}
