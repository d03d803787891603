// Tests for client/kv_member_ring.cpp (Note [A ring of users' loops]): stores that are the
// members of a key-value job in --mode allreduce, in one process (tests/support/kv_job.hpp,
// no shard servers). Their collectives go round their ring: allreduce (sum, avg, max) of a
// tensor of many pieces, broadcast and allgather end bitwise alike on every member and
// exact; a reduction holding NaN fails on every member, saying whose, and the next call
// goes round; calls named otherwise on two members fail on both, and so does every later call;
// a member that leaves fails the others' calls at once, but those it sent every piece of
// before it left (a root's broadcasts) finish; keys are refused saying why, and
// a member past the ring's is refused.
#define BOOST_TEST_MODULE kv_ring
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <limits>
#include <string>

#include "tests/support/kv_job.hpp"

using namespace troupe;
using kv::kvstore;
using test::code_of;
using test::job_fixture;

namespace {

// f(store, rank) on every member at once, each on a thread of its own; the results by rank.
template <class F>
auto on_every_member(job_fixture& job, F f) {
  using R = decltype(f(*job.stores[0], 0u));
  std::vector<std::future<R>> runs;
  for (std::uint32_t r = 0; r < job.stores.size(); ++r)
    runs.push_back(std::async(std::launch::async, [&job, &f, r] { return f(*job.stores[r], r); }));
  std::vector<R> out;
  for (auto& run : runs) out.push_back(run.get());
  return out;
}

// Values whose sums are exact in float, so the ring's order cannot change them.
float value(std::int64_t i, std::uint32_t rank) { return static_cast<float>(i % 1000) * 0.25f + static_cast<float>(rank); }

}  // namespace

BOOST_AUTO_TEST_CASE(collectives_go_round_the_ring_and_end_alike_everywhere) {
  job_fixture job(sync_mode::allreduce, 3, 0);
  BOOST_TEST(job.stores[0]->num_workers() == 3u);
  BOOST_TEST(job.stores[0]->mode() == "allreduce");
  const std::int64_t n = 3 * (std::int64_t{1} << 16) + 7;  // several pieces per chunk
  auto results = on_every_member(job, [&](kvstore& s, std::uint32_t r) {
    std::vector<float> sum(n), avg(n), most(n);
    for (std::int64_t i = 0; i < n; ++i) sum[i] = avg[i] = most[i] = value(i, r);
    s.allreduce({sum.data(), {n}}, {sum.data(), {n}}, kvstore::reduction::sum);
    s.allreduce({avg.data(), {n}}, {avg.data(), {n}}, kvstore::reduction::average);
    s.allreduce({most.data(), {n}}, {most.data(), {n}}, kvstore::reduction::max);
    std::vector<float> b(5, static_cast<float>(r + 7));
    s.broadcast({b.data(), {5}}, 2);
    std::vector<float> mine(2 * (r + 1), static_cast<float>(r));
    auto g = s.allgather({mine.data(), {static_cast<std::int64_t>(r + 1), 2}});
    sum.insert(sum.end(), avg.begin(), avg.end());
    sum.insert(sum.end(), most.begin(), most.end());
    sum.insert(sum.end(), b.begin(), b.end());
    sum.insert(sum.end(), g.data.begin(), g.data.end());
    BOOST_TEST((g.shape == std::vector<std::int64_t>{6, 2}));
    return sum;
  });
  BOOST_TEST((results[0] == results[1]));
  BOOST_TEST((results[0] == results[2]));
  const auto& x = results[0];
  bool exact = true;
  for (std::int64_t i = 0; i < n; ++i) {
    const float base = static_cast<float>(i % 1000) * 0.25f;
    exact = exact && x[i] == 3 * base + 3.f && x[n + i] == (3 * base + 3.f) / 3.f && x[2 * n + i] == base + 2.f;
  }
  BOOST_TEST(exact);
  BOOST_TEST((std::vector<float>(x.begin() + 3 * n, x.begin() + 3 * n + 5) == std::vector<float>(5, 9.f)));
  BOOST_TEST((std::vector<float>(x.begin() + 3 * n + 5, x.end()) ==
              std::vector<float>{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));
}

BOOST_AUTO_TEST_CASE(calls_named_otherwise_fail_on_every_member_and_so_do_later_ones) {
  job_fixture job(sync_mode::allreduce, 2, 0);
  auto codes = on_every_member(job, [](kvstore& s, std::uint32_t r) {
    std::vector<float> v(16, 1.f);
    const std::string first = code_of([&] { s.allreduce({v.data(), {16}}, {v.data(), {16}}, kvstore::reduction::sum, r ? "b" : "a"); });
    const std::string later = code_of([&] { s.allreduce({v.data(), {16}}, {v.data(), {16}}); });
    return first + " " + later;
  });
  BOOST_TEST(codes[0] == "bad_clock bad_clock");
  BOOST_TEST(codes[1] == "bad_clock bad_clock");
}

BOOST_AUTO_TEST_CASE(a_member_that_leaves_fails_the_others_calls_at_once) {
  job_fixture job(sync_mode::allreduce, 2, 0);
  auto& w0 = *job.stores[0];
  job.stores[1]->close();
  std::vector<float> v(8, 1.f);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    w0.allreduce({v.data(), {8}}, {v.data(), {8}});
    BOOST_FAIL("an allreduce without the other member finished");
  } catch (const kv::error& e) {
    BOOST_TEST(e.code() == "stage_lost");
    BOOST_TEST(std::string(e.what()).find("worker 1 left the job") != std::string::npos, e.what());
  }
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4)));  // not the 5 s timeout
  BOOST_TEST((v == std::vector<float>(8, 1.f)));  // the caller's array untouched
}

// Note [A ring neighbour that left]: a root that broadcasts and leaves at once has sent
// everything its neighbour's calls need, though the neighbour had not begun them.
BOOST_AUTO_TEST_CASE(a_member_that_left_after_broadcasting_leaves_its_pieces_to_the_others) {
  job_fixture job(sync_mode::allreduce, 2, 0);
  auto& w1 = *job.stores[1];
  std::vector<float> a(6, 2.5f), b(3, -1.f);
  job.stores[0]->broadcast({a.data(), {6}}, 0);
  job.stores[0]->broadcast({b.data(), {3}}, 0);
  job.stores[0]->close();
  std::vector<float> got_a(6, 0.f), got_b(3, 0.f);
  w1.broadcast({got_a.data(), {6}}, 0);
  w1.broadcast({got_b.data(), {3}}, 0);
  BOOST_TEST((got_a == a));
  BOOST_TEST((got_b == b));
  std::vector<float> v(4, 1.f);
  try {  // a call that needs worker 0 fails at once
    w1.allreduce({v.data(), {4}}, {v.data(), {4}});
    BOOST_FAIL("an allreduce without the member that left finished");
  } catch (const kv::error& e) {
    BOOST_TEST(e.code() == "stage_lost");
    BOOST_TEST(std::string(e.what()).find("worker 0 left the job") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(keys_are_refused_in_a_ring_and_so_is_a_member_past_its_workers) {
  job_fixture job(sync_mode::allreduce, 2, 0);
  auto& w = *job.stores[0];
  std::vector<float> v(4, 0.f);
  try {
    w.init("w", {v.data(), {4}});
    BOOST_FAIL("init in a ring was taken");
  } catch (const kv::error& e) {
    BOOST_TEST(e.code() == "bad_job");
    BOOST_TEST(std::string(e.what()).find("--mode allreduce") != std::string::npos, e.what());
  }
  BOOST_TEST(code_of([&] { w.push({"w"}, {{v.data(), {4}}}); }) == "bad_job");
  kv::member_options o;
  o.coordinator = job.coordinator;
  o.connect_timeout = std::chrono::seconds(5);
  auto extra = kv::join_in_process(*job.sys, o, "kv-test");
  BOOST_REQUIRE(std::holds_alternative<fault>(extra));
  BOOST_TEST((std::get<fault>(extra).code == errc::cluster_full), to_string(std::get<fault>(extra)));
}

BOOST_AUTO_TEST_CASE(a_reduction_holding_nan_fails_everywhere_and_the_ring_stays_in_step) {
  job_fixture job(sync_mode::allreduce, 2, 0);
  auto results = on_every_member(job, [](kvstore& s, std::uint32_t r) {
    std::vector<float> v(4, 1.f), out(4, -1.f);
    if (r == 1) v[2] = std::numeric_limits<float>::quiet_NaN();
    std::string said;
    try {
      s.allreduce({v.data(), {4}}, {out.data(), {4}}, kvstore::reduction::sum);
    } catch (const kv::error& e) {
      said = e.code() + (std::string(e.what()).find(r ? "this worker's" : "another worker's") != std::string::npos
                             ? " named"
                             : " unnamed");
    }
    const bool untouched = out == std::vector<float>(4, -1.f);
    std::vector<float> next(4, 2.f);
    s.allreduce({next.data(), {4}}, {next.data(), {4}}, kvstore::reduction::sum);  // the next call goes round
    return said + (untouched ? " untouched " : " written ") + std::to_string(next[0]);
  });
  BOOST_TEST(results[0] == "not_finite named untouched 4.000000");
  BOOST_TEST(results[1] == "not_finite named untouched 4.000000");
}
