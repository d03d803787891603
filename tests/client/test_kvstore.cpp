// Tests for client/kvstore.cpp on in-process shards (local groups of worker threads):
// init/push/pull in each mode, first-init-wins, integer and string keys, keys split
// across shards, row_sparse_pull against a dense pull, the server optimizer and its
// absence, staleness, barriers, and every kind of bad input as a kv::error naming what is
// wrong, with the parameters unchanged.
#define BOOST_TEST_MODULE kvstore
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <future>
#include <limits>
#include <numeric>
#include <thread>

#include "client/kvstore.hpp"
#include "core/kv_layout.hpp"
#include "tests/support/local_store.hpp"

using namespace troupe;
using kv::kvstore;
using test::contains;
using test::error_of;
using test::opts;
using troupe::kv_max_message_floats;

namespace {

kv::optimizer_spec sgd(float lr) {
  kv::optimizer_spec s;
  s.lr = lr;
  return s;
}

std::vector<float> iota(std::size_t n, float start = 1.f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sync_sums_both_workers_and_a_pull_waits_for_the_round) {
  auto group = kvstore::open_local_group(opts("sync"), 2);
  auto &w0 = *group[0], &w1 = *group[1];
  std::vector<float> init(4, 1.f), out(4);
  w0.init("w", {init.data(), {2, 2}});
  w1.init("w", {init.data(), {2, 2}});
  w0.set_optimizer(sgd(0.5f));
  std::vector<float> g0{1, 2, 3, 4}, g1{10, 20, 30, 40};
  w0.wait(w0.push({"w"}, {{g0.data(), {2, 2}}}));
  auto pulled = w0.pull({"w"}, {{out.data(), {2, 2}}});
  // Worker 1 pushes from another thread; worker 0's pull completes only then.
  std::thread other([&] { w1.wait(w1.push({"w"}, {{g1.data(), {2, 2}}})); });
  w0.wait(pulled);
  other.join();
  for (int i = 0; i < 4; ++i) BOOST_TEST(out[i] == 1.f - 0.5f * (g0[i] + g1[i]));
  BOOST_TEST(w0.rank() == 0u);
  BOOST_TEST(w1.rank() == 1u);
  BOOST_TEST(w0.num_workers() == 2u);
  BOOST_TEST(w0.mode() == "sync");
}

BOOST_AUTO_TEST_CASE(the_first_init_wins_and_keys_are_integers_or_strings) {
  auto group = kvstore::open_local_group(opts("async"), 2);
  std::vector<float> a{1, 2, 3}, b{7, 8, 9}, out(3);
  group[0]->init(std::int64_t{3}, {a.data(), {3}});
  group[1]->init(std::int64_t{3}, {b.data(), {3}});  // the key exists: its value is ignored
  group[1]->init("3", {b.data(), {3}});              // another key
  group[1]->wait(group[1]->pull({std::int64_t{3}}, {{out.data(), {3}}}));
  BOOST_TEST(out == a);
  group[1]->wait(group[1]->pull({"3"}, {{out.data(), {3}}}));
  BOOST_TEST(out == b);
}

BOOST_AUTO_TEST_CASE(a_big_key_splits_across_shards_and_comes_back_whole) {
  auto o = opts("sync", 3);
  o.big_array_bound = 64;
  auto kv = kvstore::open(o);
  const std::int64_t rows = 50, cols = 10;
  std::vector<float> value = iota(rows * cols), grad(rows * cols, 1.f), out(rows * cols);
  kv->init("emb", {value.data(), {rows, cols}});
  kv->set_optimizer(sgd(1.f));
  kv->push({"emb"}, {{grad.data(), {rows, cols}}});
  kv->wait(kv->pull({"emb"}, {{out.data(), {rows, cols}}}));
  for (std::size_t i = 0; i < out.size(); ++i) BOOST_TEST(out[i] == value[i] - 1.f);
}

BOOST_AUTO_TEST_CASE(row_sparse_pull_matches_the_dense_pull) {
  auto o = opts("async", 2);
  o.big_array_bound = 30;  // 3 rows of 8 per part
  auto kv = kvstore::open(o);
  const std::int64_t rows = 20, cols = 8;
  std::vector<float> value = iota(rows * cols), dense(rows * cols);
  kv->init(std::int64_t{0}, {value.data(), {rows, cols}});
  kv->wait(kv->pull({std::int64_t{0}}, {{dense.data(), {rows, cols}}}));
  const std::vector<std::int64_t> ids{19, 0, 1, 2, 3, 7, 7, 11};
  std::vector<float> sparse(ids.size() * cols, -1.f);
  kv->wait(kv->row_sparse_pull(std::int64_t{0}, ids, {sparse.data(), {static_cast<std::int64_t>(ids.size()), cols}}));
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::int64_t c = 0; c < cols; ++c) BOOST_TEST(sparse[i * cols + c] == dense[ids[i] * cols + c]);
  auto [code, msg] = error_of([&] { kv->row_sparse_pull(std::int64_t{0}, {20}, {sparse.data(), {1, cols}}); });
  BOOST_TEST(code == "bad_shape");
  BOOST_TEST(contains(msg, "row 20"));
}

BOOST_AUTO_TEST_CASE(without_a_server_optimizer_sync_pulls_the_sum_and_async_the_latest) {
  auto group = kvstore::open_local_group(opts("sync"), 2);
  std::vector<float> zero(2, 0.f), g0{1, 2}, g1{3, 5}, out(2);
  group[0]->init("g", {zero.data(), {2}});
  group[0]->push({"g"}, {{g0.data(), {2}}});
  group[1]->push({"g"}, {{g1.data(), {2}}});
  group[0]->wait(group[0]->pull({"g"}, {{out.data(), {2}}}));
  BOOST_TEST(out == (std::vector<float>{4, 7}));

  auto kv = kvstore::open(opts("async"));
  kv->init("g", {zero.data(), {2}});
  kv->push({"g"}, {{g0.data(), {2}}});
  kv->push({"g"}, {{g1.data(), {2}}});
  kv->wait(kv->pull({"g"}, {{out.data(), {2}}}));
  BOOST_TEST(out == g1);
}

BOOST_AUTO_TEST_CASE(async_reports_the_staleness_of_the_last_push) {
  auto group = kvstore::open_local_group(opts("async"), 2);
  std::vector<float> v(2, 0.f), g(2, 1.f), out(2);
  group[0]->init("w", {v.data(), {2}});
  group[0]->set_optimizer(sgd(1.f));
  group[0]->wait(group[0]->pull({"w"}, {{out.data(), {2}}}));
  group[1]->wait(group[1]->push({"w"}, {{g.data(), {2}}}));
  group[1]->wait(group[1]->push({"w"}, {{g.data(), {2}}}));
  group[0]->wait(group[0]->push({"w"}, {{g.data(), {2}}}));  // computed on version 0, arrives at 2
  BOOST_TEST(group[0]->staleness("w") == 2);
  BOOST_TEST(group[1]->staleness("w") == 1);
  group[0]->wait(group[0]->pull({"w"}, {{out.data(), {2}}}));
  BOOST_TEST(out[0] == -3.f);
}

BOOST_AUTO_TEST_CASE(ssp_holds_a_pull_that_runs_too_far_ahead) {
  auto o = opts("ssp");
  o.staleness = 1;
  auto group = kvstore::open_local_group(o, 2);
  std::vector<float> v(1, 0.f), g(1, 1.f), out(1);
  group[0]->init("w", {v.data(), {1}});
  group[0]->set_optimizer(sgd(1.f));
  group[0]->push({"w"}, {{g.data(), {1}}});
  group[0]->wait(group[0]->pull({"w"}, {{out.data(), {1}}}));  // one ahead: within the bound
  group[0]->push({"w"}, {{g.data(), {1}}});
  auto held = group[0]->pull({"w"}, {{out.data(), {1}}});
  auto early = std::async(std::launch::async, [&] { group[0]->wait(held); });
  BOOST_TEST((early.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout));
  group[1]->push({"w"}, {{g.data(), {1}}});
  early.get();
  BOOST_TEST(out[0] == -3.f);  // all three pushes applied
}

BOOST_AUTO_TEST_CASE(a_barrier_waits_for_every_worker) {
  auto group = kvstore::open_local_group(opts("async"), 3);
  std::atomic<int> passed{0};
  std::vector<std::thread> ts;
  for (int r = 1; r < 3; ++r) ts.emplace_back([&, r] { group[r]->barrier(), ++passed; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  BOOST_TEST(passed.load() == 0);
  group[0]->barrier();
  for (auto& t : ts) t.join();
  BOOST_TEST(passed.load() == 2);
}

BOOST_AUTO_TEST_CASE(bad_input_is_a_clear_error_and_changes_nothing) {
  auto kv = kvstore::open(opts("async"));
  std::vector<float> v{1, 2, 3, 4}, out(4);
  kv->init("w", {v.data(), {2, 2}});
  kv->set_optimizer(sgd(1.f));

  auto never = error_of([&] { kv->push({"nope"}, {{v.data(), {2, 2}}}); });
  BOOST_TEST(never.first == "no_such_key");
  BOOST_TEST(contains(never.second, "\"nope\""));
  never = error_of([&] { kv->pull({std::int64_t{5}}, {{out.data(), {2, 2}}}); });
  BOOST_TEST(never.first == "no_such_key");

  auto shape = error_of([&] { kv->push({"w"}, {{v.data(), {4}}}); });
  BOOST_TEST(shape.first == "bad_shape");
  BOOST_TEST(contains(shape.second, "\"w\""));
  BOOST_TEST(contains(shape.second, "(4,)"));
  BOOST_TEST(contains(shape.second, "(2, 2)"));

  auto redefined = error_of([&] { kv->init("w", {v.data(), {1, 4}}); });
  BOOST_TEST(redefined.first == "bad_shape");

  auto utf8 = error_of([&] { kv->init(std::string("bad\xff"), {v.data(), {4}}); });
  BOOST_TEST(utf8.first == "malformed");
  BOOST_TEST(contains(utf8.second, "UTF-8"));

  std::vector<float> nan{1, std::numeric_limits<float>::quiet_NaN(), 0, 0};
  auto finite = error_of([&] { kv->push({"w"}, {{nan.data(), {2, 2}}}); });
  BOOST_TEST(finite.first == "not_finite");
  BOOST_TEST(contains(finite.second, "nothing was pushed"));

  auto twice = error_of([&] { kv->push({"w", "w"}, {{v.data(), {2, 2}}, {v.data(), {2, 2}}}); });
  BOOST_TEST(twice.first == "duplicate");

  auto counts = error_of([&] { kv->push({"w"}, {}); });
  BOOST_TEST(counts.first == "bad_shape");

  auto handle = error_of([&] { kv->wait(12345); });
  BOOST_TEST(handle.first == "bad_job");

  kv::optimizer_spec bad_lr = sgd(-1.f);
  auto opt = error_of([&] { kv->set_optimizer(bad_lr); });
  BOOST_TEST(opt.first == "bad_job");
  BOOST_TEST(contains(opt.second, "lr"));
  bad_lr.lr = 0.1f, bad_lr.kind = "lamb";
  BOOST_TEST(contains(error_of([&] { kv->set_optimizer(bad_lr); }).second, "lamb"));

  kv->wait(kv->pull({"w"}, {{out.data(), {2, 2}}}));
  BOOST_TEST(out == v);  // none of the above reached the parameters

  kv->close();
  kv->close();  // idempotent
  auto closed = error_of([&] { kv->pull({"w"}, {{out.data(), {2, 2}}}); });
  BOOST_TEST(closed.first == "closed");
  BOOST_TEST(error_of([&] { kv->barrier(); }).first == "closed");
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused) {
  kv::options o;
  o.type = "dist_tpu";
  BOOST_TEST(contains(error_of([&] { kvstore::open(o); }).second, "dist_tpu"));
  o = kv::options{};
  o.mode = "eventually";
  BOOST_TEST(contains(error_of([&] { kvstore::open(o); }).second, "eventually"));
  o = kv::options{};
  o.servers = 0;
  BOOST_TEST(error_of([&] { kvstore::open(o); }).first == "bad_job");
}

BOOST_AUTO_TEST_CASE(a_call_larger_than_one_message_is_split_and_comes_back_whole) {
  auto kv = kvstore::open(opts("sync", 1));
  const std::int64_t n = kv_max_message_floats + 1000;  // two parts on one shard: two messages
  std::vector<float> value(n, 1.f), grad(n, 0.5f), out(n);
  kv->init("big", {value.data(), {n}});
  kv->set_optimizer(sgd(1.f));
  kv->wait(kv->push({"big"}, {{grad.data(), {n}}}));
  kv->wait(kv->pull({"big"}, {{out.data(), {n}}}));
  BOOST_TEST(out.front() == 0.5f);
  BOOST_TEST(out.back() == 0.5f);
}
