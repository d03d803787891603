// Tests for client/collectives.cpp and the stores' collective calls, over in-process local
// groups: allreduce (average, sum, max) equals the rank-ordered reduction bitwise on every
// worker, for tensors cut into many uneven pieces over several shards, in place too;
// broadcast from any root; allgather of uneven first extents, an empty one included;
// unnamed calls meet by their order and named ones by name; disagreeing calls fail
// everywhere with bad_shape, a worker that leaves first fails the others with member_lost,
// and a call nobody else makes times out, without touching the caller's array afterwards.
#define BOOST_TEST_MODULE collectives
#include <boost/test/unit_test.hpp>

#include <future>
#include <random>

#include "client/collectives.hpp"
#include "client/kvstore.hpp"
#include "client/local_transport.hpp"

using namespace troupe;
using namespace troupe::kv;

namespace {

constexpr auto timeout = std::chrono::seconds(5);

std::vector<std::unique_ptr<kv_transport>> group(std::uint32_t workers, std::uint32_t shards) {
  local_group_config cfg;
  cfg.servers = shards;
  return make_local_group(cfg, workers);
}

// Worker r's input: n seeded floats of mixed magnitude, so the order of a sum shows.
std::vector<float> input(std::uint32_t r, std::int64_t n) {
  std::mt19937 gen(1234 + r);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(gen) * (gen() % 2 ? 1e6f : 1e-3f);
  return v;
}

// Runs f(r) for every rank r on its own thread; the results by rank. Boost.Test's checks
// are not thread-safe, so f returns what the test then checks on this thread.
template <class F>
auto on_every_rank(std::uint32_t workers, F f) {
  std::vector<std::future<decltype(f(0u))>> runs;
  for (std::uint32_t r = 0; r < workers; ++r) runs.push_back(std::async(std::launch::async, f, r));
  std::vector<decltype(f(0u))> out;
  for (auto& x : runs) out.push_back(x.get());
  return out;
}

collective_call call(std::string name, std::int64_t bound = kv_max_message_floats,
                     std::chrono::milliseconds t = timeout) {
  return {std::move(name), t, bound};
}

}  // namespace

BOOST_AUTO_TEST_CASE(allreduce_is_the_rank_ordered_reduction_bitwise_on_every_worker) {
  for (const std::uint32_t workers : {1u, 2u, 3u, 5u})
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{1000}})
      for (const reduce_op op : {reduce_op::sum, reduce_op::avg, reduce_op::max, reduce_op::min, reduce_op::product}) {
        auto g = group(workers, 3);
        std::vector<float> want = input(0, n);
        for (std::uint32_t r = 1; r < workers; ++r) {
          const auto x = input(r, n);
          for (std::int64_t i = 0; i < n; ++i)
            want[i] = op == reduce_op::max       ? std::max(want[i], x[i])
                      : op == reduce_op::min     ? std::min(want[i], x[i])
                      : op == reduce_op::product ? want[i] * x[i]
                                                 : want[i] + x[i];
        }
        if (op == reduce_op::avg)
          for (auto& w : want) w /= static_cast<float>(workers);
        // Pieces of at most 4 elements: many, uneven, over 3 shards.
        auto results = on_every_rank(workers, [&](std::uint32_t r) {
          auto v = input(r, n);
          auto f = run_allreduce(*g[r], call("t", 4), v.data(), v.data(), n, op);  // in place
          return std::make_pair(v, f);
        });
        for (std::uint32_t r = 0; r < workers; ++r) {
          const auto& [v, f] = results[r];
          BOOST_TEST(!f, (f ? to_string(*f) : ""));
          BOOST_TEST((v == want), "rank " << r << " of " << workers << ", n " << n << ", " << name_of(op));
        }
      }
}

BOOST_AUTO_TEST_CASE(broadcast_gives_every_worker_the_roots_values) {
  auto g = group(3, 2);
  auto results = on_every_rank(3, [&](std::uint32_t r) {
    auto v = input(r, 11);
    auto f = run_broadcast(*g[r], call("b", 3), v.data(), 11, 2);
    return std::make_pair(v, f);
  });
  for (auto& [v, f] : results) {
    BOOST_TEST(!f, (f ? to_string(*f) : ""));
    BOOST_TEST((v == input(2, 11)));
  }
}

BOOST_AUTO_TEST_CASE(allgather_concatenates_uneven_first_extents_in_rank_order) {
  auto g = group(3, 2);
  const std::vector<std::int64_t> rows = {3, 0, 5};
  auto results = on_every_rank(3, [&](std::uint32_t r) {
    const auto v = input(r, rows[r] * 2);
    return run_allgather(*g[r], call("a", 4), v.data(), {rows[r], 2});
  });
  std::vector<float> want;
  for (std::uint32_t r = 0; r < 3; ++r) {
    const auto v = input(r, rows[r] * 2);
    want.insert(want.end(), v.begin(), v.end());
  }
  for (auto& result : results) {
    BOOST_REQUIRE(std::holds_alternative<gathered_tensor>(result));
    const auto& got = std::get<gathered_tensor>(result);
    BOOST_TEST((got.data == want));
    BOOST_TEST((got.dims == std::vector<std::int64_t>{8, 2}));
    BOOST_TEST((got.rows == rows));
    BOOST_TEST((got.ranks == std::vector<std::uint32_t>{0, 1, 2}));
  }
}

BOOST_AUTO_TEST_CASE(allgather_refuses_scalars_and_disagreeing_trailing_dimensions) {
  auto g = group(2, 1);
  float x = 1.f;
  auto scalar = run_allgather(*g[0], call("s"), &x, {});
  BOOST_REQUIRE(std::holds_alternative<fault>(scalar));
  BOOST_TEST((std::get<fault>(scalar).code == errc::bad_shape));
  auto results = on_every_rank(2, [&](std::uint32_t r) {
    std::vector<float> v(6, 1.f);
    return run_allgather(*g[r], call("a"), v.data(), r == 0 ? std::vector<std::int64_t>{2, 3} : std::vector<std::int64_t>{3, 2});
  });
  for (auto& got : results) {
    BOOST_REQUIRE(std::holds_alternative<fault>(got));
    BOOST_TEST((std::get<fault>(got).code == errc::bad_shape));
    BOOST_TEST(std::get<fault>(got).detail.find("every dimension but the first must agree") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(calls_that_disagree_fail_on_every_worker) {
  auto g = group(2, 2);
  auto results = on_every_rank(2, [&](std::uint32_t r) {
    std::vector<float> v(r == 0 ? 6 : 8, 1.f);
    return run_allreduce(*g[r], call("x", 100), v.data(), v.data(), static_cast<std::int64_t>(v.size()), reduce_op::sum);
  });
  for (auto& f : results) {
    BOOST_REQUIRE(f.has_value());
    BOOST_TEST((f->code == errc::bad_shape), to_string(*f));
  }
}

BOOST_AUTO_TEST_CASE(a_worker_that_leaves_first_fails_the_call_on_the_others_naming_it) {
  auto g = group(3, 1);
  std::promise<void> gave;
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<float> v(4, 1.f);
    auto f = run_allreduce(*g[0], call("late"), v.data(), v.data(), 4, reduce_op::sum);
    return f;
  });
  std::vector<float> v(4, 1.f);
  std::thread two([&] { run_allreduce(*g[2], call("late"), v.data(), v.data(), 4, reduce_op::sum); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both pieces wait for rank 1
  const auto t0 = std::chrono::steady_clock::now();
  g[1]->close();
  auto f = waiting.get();
  two.join();
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::member_lost));
  BOOST_TEST(f->detail.find("member 1 left") != std::string::npos, f->detail);
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)));
}

BOOST_AUTO_TEST_CASE(a_call_nobody_else_makes_times_out_and_lets_go_of_the_array) {
  auto g = group(2, 1);
  std::vector<float> v(4, 1.f);
  const auto t0 = std::chrono::steady_clock::now();
  auto f = run_allreduce(*g[0], call("alone", 100, std::chrono::milliseconds(200)), v.data(), v.data(), 4,
                         reduce_op::sum);
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::timed_out));
  BOOST_TEST(f->detail.find("same collective calls in the same order") != std::string::npos, f->detail);
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)));
  // The other worker's piece comes later: the round closes, but the answer goes nowhere.
  std::vector<float> w(4, 2.f);
  BOOST_TEST(!run_allreduce(*g[1], call("alone", 100), w.data(), w.data(), 4, reduce_op::sum));
  BOOST_TEST((w == std::vector<float>(4, 3.f)));
  BOOST_TEST((v == std::vector<float>(4, 1.f)));
}

// The public API: unnamed calls are numbered per store, so the workers' n-th unnamed
// calls meet; a named call meets its name, here made on another thread while the
// unnamed ones go on.
BOOST_AUTO_TEST_CASE(the_stores_calls_meet_by_order_or_by_name) {
  options o;
  o.servers = 2;
  auto stores = kvstore::open_local_group(o, 2);
  auto results = on_every_rank(2, [&](std::uint32_t r) {
    kvstore& s = *stores[r];
    std::vector<float> named(3, r == 0 ? 1.f : 5.f), named_out(3);
    auto aside = std::async(std::launch::async, [&] {
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      s.allreduce({named.data(), {3}}, {named_out.data(), {3}}, kvstore::reduction::sum, "n");
    });
    std::vector<float> first(2, static_cast<float>(r + 1)), second(2, 10.f * (r + 1));
    std::vector<float> first_out(2), second_out(2);
    s.allreduce({first.data(), {2}}, {first_out.data(), {2}});  // average by default
    s.allreduce({second.data(), {2}}, {second_out.data(), {2}}, kvstore::reduction::max);
    std::vector<float> b(2, static_cast<float>(r));
    s.broadcast({b.data(), {2}}, 1);
    auto g = s.allgather({first.data(), {1, 2}});
    aside.get();
    return std::make_tuple(named_out, first_out, second_out, b, g.data, g.shape);
  });
  for (auto& [named, first, second, b, gathered, shape] : results) {
    BOOST_TEST((named == std::vector<float>(3, 6.f)));
    BOOST_TEST((first == std::vector<float>(2, 1.5f)));
    BOOST_TEST((second == std::vector<float>(2, 20.f)));
    BOOST_TEST((b == std::vector<float>(2, 1.f)));
    BOOST_TEST((gathered == std::vector<float>{1.f, 1.f, 2.f, 2.f}));
    BOOST_TEST((shape == std::vector<std::int64_t>{2, 2}));
  }
  std::vector<float> a(2), c(3);
  try {
    stores[0]->allreduce({a.data(), {2}}, {c.data(), {3}});
    BOOST_FAIL("shapes that differ were taken");
  } catch (const error& e) {
    BOOST_TEST(e.code() == "bad_shape");
  }
}
