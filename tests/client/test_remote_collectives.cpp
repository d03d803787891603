// Tests for the collectives of client/remote_transport.cpp and client/kv_member.cpp over
// a key-value job's actors in one process (tests/support/kv_job.hpp): collectives cross
// the shards and fail on every member alike; with the job's tag they go through shared
// memory bit-exactly; an answer that comes after the caller gave up never reaches the
// caller's array.
#define BOOST_TEST_MODULE remote_collectives
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <future>
#include <thread>

#include "tests/support/kv_job.hpp"
#include "tests/support/shm_tag.hpp"

using namespace troupe;
using kv::kvstore;
using test::code_of;
using test::fast_path_tags;
using test::job_fixture;

// Collectives through the job's shards (Note [Collectives on the shards]): a tensor
// larger than two messages is cut over both shards and comes back as the rank-ordered
// sum on both members; broadcast and allgather; calls that disagree fail on both members,
// and a member that leaves before its call fails the other's at once with member_lost.
BOOST_AUTO_TEST_CASE(collectives_cross_the_shards_and_fail_everywhere_alike) {
  job_fixture job(sync_mode::async);
  auto &w0 = *job.stores[0], &w1 = *job.stores[1];
  const std::int64_t n = 2 * kv_max_message_floats + 5;
  auto both = [&](auto f) {
    auto other = std::async(std::launch::async, [&] { return f(w1, 1u); });
    auto mine = f(w0, 0u);
    return std::make_pair(mine, other.get());
  };
  auto sums = both([&](kvstore& s, std::uint32_t r) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) * (r ? -0.5f : 1.f) + 0.25f;
    s.allreduce({v.data(), {n}}, {v.data(), {n}}, kvstore::reduction::sum);
    return v;
  });
  BOOST_TEST((sums.first == sums.second));
  bool exact = true;
  for (std::int64_t i = 0; i < n; ++i)
    exact = exact && sums.first[i] == (static_cast<float>(i % 1000) + 0.25f) + (static_cast<float>(i % 1000) * -0.5f + 0.25f);
  BOOST_TEST(exact);
  auto spread = both([&](kvstore& s, std::uint32_t r) {
    std::vector<float> b(3, static_cast<float>(r + 7));
    s.broadcast({b.data(), {3}}, 1);
    std::vector<float> mine(r + 1, static_cast<float>(r));
    auto g = s.allgather({mine.data(), {static_cast<std::int64_t>(r + 1)}});
    b.insert(b.end(), g.data.begin(), g.data.end());
    return b;
  });
  BOOST_TEST((spread.first == std::vector<float>{8.f, 8.f, 8.f, 0.f, 1.f, 1.f}));
  BOOST_TEST((spread.second == spread.first));
  auto disagree = both([&](kvstore& s, std::uint32_t r) {
    std::vector<float> v(r ? 4 : 5, 1.f);
    const std::int64_t len = static_cast<std::int64_t>(v.size());
    return code_of([&] { s.allreduce({v.data(), {len}}, {v.data(), {len}}); });
  });
  BOOST_TEST(disagree.first == "bad_shape");
  BOOST_TEST(disagree.second == "bad_shape");
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<float> v(4, 1.f);
    return code_of([&] { w0.allreduce({v.data(), {4}}, {v.data(), {4}}); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  w1.close();
  BOOST_TEST(waiting.get() == "member_lost");
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3)));  // the store waits 5 s
}

// On one host a collective's pieces and answers take the members' shared-memory slots
// (once an answer has confirmed a channel, pieces go in push slots too), bit-exact; a
// shard without the fast path answers the same in the messages.
BOOST_AUTO_TEST_CASE(collectives_take_the_fast_path_bit_exact) {
  const std::string tag = test::fresh_shm_tag();
  for (const fast_path_tags& tags : {fast_path_tags{tag, tag}, fast_path_tags{tag, ""}}) {
    job_fixture job(sync_mode::async, 2, 2, 0, tags);
    const std::int64_t n = 40000;
    auto run = [&](std::uint32_t r) {
      std::vector<float> v(static_cast<std::size_t>(n)), got;
      for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * (r ? 1e-3f : 7.f);
      for (int call = 0; call < 3; ++call) {
        std::vector<float> out(v.size());
        job.stores[r]->allreduce({v.data(), {n}}, {out.data(), {n}}, kvstore::reduction::sum);
        got.insert(got.end(), out.begin(), out.end());
      }
      return got;
    };
    auto other = std::async(std::launch::async, run, 1u);
    const auto mine = run(0u);
    BOOST_TEST((mine == other.get()));
    bool exact = true;
    for (std::int64_t i = 0; i < n; ++i)
      exact = exact && mine[i] == static_cast<float>(i) * 7.f + static_cast<float>(i) * 1e-3f;
    BOOST_TEST(exact);
    const auto moved = job.stores[0]->transfers();
    if (tags.shard.empty()) {
      BOOST_TEST(moved.shared_memory_calls == 0u);
    } else {
      // 3 calls x 2 pieces: every answer in a slot, and the pieces of the later calls too.
      BOOST_TEST(moved.shared_memory_calls >= 8u);
      BOOST_TEST(moved.network_calls <= 4u);
    }
  }
}

// A wait that times out abandons the call: the answer that comes after it is dropped,
// over the network and through the fast path's reply slot, which is free again after.
BOOST_AUTO_TEST_CASE(an_answer_after_the_wait_gave_up_never_reaches_the_callers_array) {
  const std::string tag = test::fresh_shm_tag();
  for (const fast_path_tags& tags : {fast_path_tags{}, fast_path_tags{tag, tag}}) {
    job_fixture job(sync_mode::sync, 2, 1, 0, tags);
    auto &w0 = *job.stores[0], &w1 = *job.stores[1];
    const std::int64_t n = 8192;  // big enough for the fast path's slots
    std::vector<float> v(n, 0.f), g(n, 1.f), out(n), fresh(n);
    w0.init("w", {v.data(), {n}});
    w0.wait(w0.pull({"w"}, {{out.data(), {n}}}));  // confirms w0's channel when there is one
    w0.push({"w"}, {{g.data(), {n}}});
    auto held = w0.pull({"w"}, {{out.data(), {n}}});  // held: worker 1 has not pushed
    BOOST_TEST(code_of([&] { w0.wait(held, std::chrono::milliseconds(200)); }) == "timed_out");
    std::fill(out.begin(), out.end(), -1.f);
    w1.push({"w"}, {{g.data(), {n}}});  // the round closes and the shard answers the held pull
    w1.wait_all();
    // Answers from one shard arrive in order: once this one is in, the held one was dropped.
    w0.wait(w0.pull({"w"}, {{fresh.data(), {n}}}));
    BOOST_TEST(fresh[0] == 2.f);  // the round's sum
    BOOST_TEST(fresh[n - 1] == 2.f);
    BOOST_TEST((std::count(out.begin(), out.end(), -1.f) == n));
    BOOST_TEST(code_of([&] { w0.wait_all(); }) == "no error");
  }
}
