// Tests for client/remote_transport.cpp and client/kv_member.cpp: stores that are members
// of a key-value job's actors (the kv coordinator and shard servers, in one process, by
// handle), so the whole path a launched job takes runs here: join, define on the shards,
// per-shard pushes and pulls, barriers, the shards' optimizer, a first init larger than
// one message sent in chunks. A worker that leaves lets sync rounds close without it; a
// lost shard fails the calls in flight at once with shard_lost instead of letting them
// time out; a shard that refuses the first connections is tried again until the connect
// timeout; bad keys and shapes are refused by the store and by the shard (the collectives
// are in test_remote_collectives.cpp). With the job's
// tag the same-host fast path runs in one process too: tensors cross through the members'
// shared-memory slots, bit-exact, and a shard without it answers in the message. With the
// job's --compression pushes of several keys travel 2-bit encoded per key, with each
// key's error feedback, and pulls come back in its --pull-precision.
#define BOOST_TEST_MODULE remote_transport
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
using test::sgd;

BOOST_AUTO_TEST_CASE(two_members_sum_in_sync_across_two_shards) {
  job_fixture job(sync_mode::sync, 2, 2, 10);
  auto &w0 = *job.stores[0], &w1 = *job.stores[1];
  BOOST_TEST(w0.num_workers() == 2u);
  BOOST_TEST(w0.mode() == "sync");
  std::vector<float> init(30, 1.f), other(30, 9.f), out(30);
  w0.init("w", {init.data(), {6, 5}});
  w1.init("w", {other.data(), {6, 5}});  // the key exists: the first init won
  w1.set_optimizer(sgd(0.5f));
  std::vector<float> g0(30), g1(30);
  for (int i = 0; i < 30; ++i) g0[i] = static_cast<float>(i), g1[i] = 100.f + static_cast<float>(i);
  auto pushed = w0.push({"w"}, {{g0.data(), {6, 5}}});
  auto pulled = w0.pull({"w"}, {{out.data(), {6, 5}}});
  w1.wait(w1.push({"w"}, {{g1.data(), {6, 5}}}));
  w0.wait(pushed);
  w0.wait(pulled);
  for (int i = 0; i < 30; ++i) BOOST_TEST(out[i] == 1.f - 0.5f * (g0[i] + g1[i]));
  std::vector<float> rows(10);
  w1.wait(w1.row_sparse_pull("w", {5, 0}, {rows.data(), {2, 5}}));
  for (int c = 0; c < 5; ++c) {
    BOOST_TEST(rows[c] == out[25 + c]);
    BOOST_TEST(rows[5 + c] == out[c]);
  }
}

BOOST_AUTO_TEST_CASE(async_applies_each_push_and_a_barrier_meets_everyone) {
  job_fixture job(sync_mode::async);
  auto &w0 = *job.stores[0], &w1 = *job.stores[1];
  std::vector<float> v(4, 0.f), g(4, 1.f), out(4);
  w0.init(std::int64_t{7}, {v.data(), {4}});
  w0.set_optimizer(sgd(1.f));
  w0.wait(w0.push({std::int64_t{7}}, {{g.data(), {4}}}));
  auto other = std::async(std::launch::async, [&] { w1.barrier(); });
  w0.barrier();
  other.get();
  w1.wait(w1.push({std::int64_t{7}}, {{g.data(), {4}}}));
  w1.wait(w1.pull({std::int64_t{7}}, {{out.data(), {4}}}));
  BOOST_TEST(out[0] == -2.f);
  BOOST_TEST(w1.staleness(std::int64_t{7}) == 1);  // it never pulled before its push: base version 0, applied at 1
}

BOOST_AUTO_TEST_CASE(a_key_larger_than_one_message_is_initialised_in_chunks) {
  job_fixture job(sync_mode::async, 2, 1);  // one shard holds all 9 parts: three definitions
  auto &w0 = *job.stores[0], &w1 = *job.stores[1];
  const std::int64_t n = 2 * kv_max_message_floats + 12345;
  std::vector<float> init(n), other(n, 5.f), out(n);
  for (std::int64_t i = 0; i < n; ++i) init[i] = static_cast<float>(i % 1000003);
  w0.init("big", {init.data(), {n}});
  w1.init("big", {other.data(), {n}});  // the key exists: answered at its first chunk
  w1.wait(w1.pull({"big"}, {{out.data(), {n}}}));
  BOOST_TEST(std::equal(out.begin(), out.end(), init.begin()));
}

BOOST_AUTO_TEST_CASE(bad_keys_and_shapes_are_refused_over_the_job_too) {
  job_fixture job(sync_mode::async, 1, 1);
  auto& w = *job.stores[0];
  std::vector<float> v(4, 0.f);
  w.init("w", {v.data(), {2, 2}});
  BOOST_TEST(code_of([&] { w.push({"never"}, {{v.data(), {4}}}); }) == "no_such_key");
  BOOST_TEST(code_of([&] { w.init("w", {v.data(), {4}}); }) == "bad_shape");
  BOOST_TEST(code_of([&] { w.push({"w"}, {{v.data(), {4}}}); }) == "bad_shape");
  kv::optimizer_spec bad = sgd(0.1f);
  bad.kind = "lamb";
  BOOST_TEST(code_of([&] { w.set_optimizer(bad); }) == "bad_job");
  w.close();
  BOOST_TEST(code_of([&] { w.barrier(); }) == "closed");
}

BOOST_AUTO_TEST_CASE(a_member_that_leaves_no_longer_holds_sync_rounds) {
  job_fixture job(sync_mode::sync);
  auto &w0 = *job.stores[0], &w1 = *job.stores[1];
  std::vector<float> v(2, 0.f), g(2, 3.f), out(2);
  w0.init("w", {v.data(), {2}});
  w1.close();
  // The coordinator tells the shards; the round then closes with worker 0 alone.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  w0.push({"w"}, {{g.data(), {2}}});
  w0.wait(w0.pull({"w"}, {{out.data(), {2}}}));
  BOOST_TEST(out[0] == 3.f);  // no optimizer: the round's sum
}

BOOST_AUTO_TEST_CASE(a_lost_shard_fails_the_calls_in_flight_at_once) {
  job_fixture job(sync_mode::sync);
  auto& w0 = *job.stores[0];
  std::vector<float> v(2, 0.f), g(2, 1.f), out(2);
  w0.init("w", {v.data(), {2}});
  w0.push({"w"}, {{g.data(), {2}}});
  auto held = w0.pull({"w"}, {{out.data(), {2}}});  // held: worker 1 has not pushed
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& s : job.shards) caf::anon_send_exit(s, caf::exit_reason::kill);
  std::string code = code_of([&] { w0.wait(held); });
  BOOST_TEST(code == "shard_lost");
  const bool fast = std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4);
  BOOST_TEST(fast);  // well before the 5 s request timeout
  BOOST_TEST(code_of([&] { w0.wait(w0.pull({"w"}, {{out.data(), {2}}})); }) == "shard_lost");
}

namespace {

// Stands in for the middleman across nodes: refuses the first `refusals` connections as
// a node busy with other handshakes does (connection_timeout), then hands out `shard`.
caf::behavior busy_connector(caf::event_based_actor*, caf::actor shard, std::shared_ptr<std::atomic<int>> tries,
                             int refusals) {
  return {[=](caf::connect_atom, const std::string&,
              std::uint16_t) -> caf::result<caf::node_id, caf::strong_actor_ptr, std::set<std::string>> {
    if (++*tries <= refusals) return caf::make_error(caf::sec::connection_timeout);
    return {shard.node(), caf::actor_cast<caf::strong_actor_ptr>(shard), std::set<std::string>{}};
  }};
}

// One member joins a one-shard job whose shard it must connect to by address, through a
// connector that refuses `refusals` times; answers the join's fault, if it failed.
std::optional<fault> join_through_busy_connector(int refusals, std::shared_ptr<std::atomic<int>> tries) {
  caf::actor_system_config cfg;
  configure_in_process(cfg);
  caf::actor_system sys{cfg};
  job_spec job;
  job.kv = true;
  job.job_id = "kv-test";
  job.workers = 1;
  job.servers = 1;
  job.request_timeout_ms = 5000;
  auto coordinator = spawn_coordinator(sys, job, model::none(), nullptr, {});
  auto shard = spawn_shard_server(sys, coordinator, "kv-test", std::chrono::seconds(5), {}, "");
  join_as_shard(shard, "127.0.0.1", 9);  // an address, so the member must connect
  kv::member_options o;
  o.coordinator = coordinator;
  o.connect_timeout = std::chrono::seconds(3);
  o.connector = caf::actor_cast<caf::io::middleman_actor>(
      sys.spawn(busy_connector, caf::actor_cast<caf::actor>(shard), tries, refusals));
  auto joined = kv::join_in_process(sys, o, "kv-test", "");
  std::optional<fault> out;
  if (auto* f = std::get_if<fault>(&joined)) out = *f;
  joined = fault{errc::closed, ""};  // the member leaves before its job's actors stop
  caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  return out;
}

}  // namespace

// Every member of a launched job connects to the shards at once; a shard node busy with
// the others' handshakes may refuse one. The member tries again until --connect-timeout,
// and only then fails the join, naming the shard.
BOOST_AUTO_TEST_CASE(a_shard_too_busy_to_answer_the_first_connections_is_tried_again) {
  auto tries = std::make_shared<std::atomic<int>>(0);
  auto f = join_through_busy_connector(3, tries);
  BOOST_TEST(tries->load() == 4);
  BOOST_TEST(!f, (f ? to_string(*f) : ""));
}

BOOST_AUTO_TEST_CASE(a_shard_that_never_answers_fails_the_join_naming_it_within_the_connect_timeout) {
  auto tries = std::make_shared<std::atomic<int>>(0);
  const auto t0 = std::chrono::steady_clock::now();
  auto f = join_through_busy_connector(1000, tries);
  const auto took = std::chrono::steady_clock::now() - t0;
  BOOST_REQUIRE(f);
  BOOST_TEST((f->code == errc::shard_lost));
  BOOST_TEST(f->detail.find("cannot reach shard 0 at 127.0.0.1:9") != std::string::npos, f->detail);
  BOOST_TEST(tries->load() > 1);
  BOOST_TEST((took < std::chrono::seconds(10)));
}


// Calls of 4,096 floats or more take the members' slots once a pull's answer
// confirmed them; what comes back is bit-exact, in sync and with row_sparse_pull.
BOOST_AUTO_TEST_CASE(the_fast_path_carries_pushes_and_pulls_bit_exact) {
  const std::string tag = test::fresh_shm_tag();
  job_fixture job(sync_mode::sync, 2, 2, 0, {tag, tag});
  auto &w0 = *job.stores[0], &w1 = *job.stores[1];
  const std::int64_t rows = 300, cols = 100, n = rows * cols;  // 30,000 floats: one part per key
  std::vector<float> init(n), out0(n), out1(n), g0(n), g1(n);
  for (std::int64_t i = 0; i < n; ++i) {
    init[i] = 0.001f * static_cast<float>(i % 977) - 0.3f;
    g0[i] = 1e-3f * static_cast<float>(i % 13);
    g1[i] = -7e-4f * static_cast<float>(i % 17);
  }
  w0.init("emb", {init.data(), {rows, cols}});
  w0.set_optimizer(sgd(0.25f));
  w0.wait(w0.pull({"emb"}, {{out0.data(), {rows, cols}}}));  // confirms w0's channel to the key's shard
  w1.wait(w1.pull({"emb"}, {{out1.data(), {rows, cols}}}));
  BOOST_TEST(std::memcmp(out0.data(), init.data(), n * 4) == 0);
  std::vector<float> expect(init);
  for (int round = 0; round < 3; ++round) {
    auto p0 = w0.push({"emb"}, {{g0.data(), {rows, cols}}});
    auto p1 = w1.push({"emb"}, {{g1.data(), {rows, cols}}});
    w0.wait(p0);
    w1.wait(p1);
    w0.wait(w0.pull({"emb"}, {{out0.data(), {rows, cols}}}));
    w1.wait(w1.pull({"emb"}, {{out1.data(), {rows, cols}}}));
    for (std::int64_t i = 0; i < n; ++i) expect[i] -= 0.25f * (g0[i] + g1[i]);  // the shard sums in rank order
  }
  BOOST_TEST(std::memcmp(out0.data(), expect.data(), n * 4) == 0);
  BOOST_TEST(std::memcmp(out1.data(), expect.data(), n * 4) == 0);
  // 50 rows of 100 floats: 5,000 floats, above the fast path's floor.
  std::vector<std::int64_t> ids;
  for (std::int64_t r = rows - 1; r >= 0; r -= 6) ids.push_back(r);
  std::vector<float> some(ids.size() * cols);
  w1.wait(w1.row_sparse_pull("emb", ids, {some.data(), {static_cast<std::int64_t>(ids.size()), cols}}));
  for (std::size_t i = 0; i < ids.size(); ++i)
    BOOST_TEST(std::memcmp(&some[i * cols], &expect[ids[i] * cols], cols * 4) == 0);
  const auto moved0 = w0.transfers(), moved1 = w1.transfers();
  // w0: its first pull confirmed the channel, so every push and every pull used a slot.
  BOOST_TEST(moved0.shared_memory_calls == 7u);
  BOOST_TEST(moved0.network_calls == 0u);
  BOOST_TEST(moved0.shared_memory_bytes == 7u * n * 4);
  BOOST_TEST(moved1.shared_memory_calls == 8u);
  // Calls below the floor go in the message.
  std::vector<float> tiny(4, 0.f);
  w0.init("tiny", {tiny.data(), {4}});
  w0.wait(w0.pull({"tiny"}, {{tiny.data(), {4}}}));
  BOOST_TEST(w0.transfers().network_calls == 1u);
}

// A shard that cannot map the member's segments (here: its fast path is off, as on another
// host) answers in the message; the member then stops offering slots to it, and the job's
// values are the same.
BOOST_AUTO_TEST_CASE(a_shard_without_the_fast_path_is_answered_over_the_network) {
  job_fixture job(sync_mode::async, 1, 1, 0, {test::fresh_shm_tag(), ""});
  auto& w = *job.stores[0];
  const std::int64_t n = 10000;
  std::vector<float> v(n, 2.f), g(n, 0.5f), out(n);
  w.init("w", {v.data(), {n}});
  w.set_optimizer(sgd(1.f));
  for (int i = 0; i < 3; ++i) {
    w.wait(w.push({"w"}, {{g.data(), {n}}}));
    w.wait(w.pull({"w"}, {{out.data(), {n}}}));
  }
  for (std::int64_t i = 0; i < n; ++i) BOOST_TEST_REQUIRE(out[i] == 0.5f);
  BOOST_TEST(w.transfers().shared_memory_calls == 0u);
  BOOST_TEST(w.transfers().network_calls == 6u);
}

BOOST_AUTO_TEST_CASE(compressed_pushes_keep_each_keys_residual_and_pulls_come_in_the_pull_precision) {
  job_fixture job(sync_mode::sync, 2, 1, 0, {}, *parse_grad_codec("2bit:0.5"), *parse_grad_codec("fp16"));
  auto &w0 = *job.stores[0], &w1 = *job.stores[1];
  std::vector<float> a(4, 0.f), b(6, 0.f);
  w0.init("a", {a.data(), {4}});
  w0.init("b", {b.data(), {6}});
  w1.init("a", {a.data(), {4}});
  w1.init("b", {b.data(), {6}});
  // No server optimizer: a sync pull returns the round's summed gradient. Worker 1 pushes
  // zeros; worker 0 pushes its gradient once, then zeros, so what 2-bit leaves out of a
  // key arrives with that key's later pushes.
  const std::vector<float> ga{1.f, 0.2f, -1.f, 0.f}, gb{0.6f, -0.3f, 0.f, 0.f, 0.f, 2.f};
  const std::vector<float> za(4, 0.f), zb(6, 0.f);
  const std::vector<std::vector<float>> want_a{{0.5f, 0, -0.5f, 0}, {0.5f, 0, -0.5f, 0}, {0, 0, 0, 0}};
  const std::vector<std::vector<float>> want_b{{0.5f, 0, 0, 0, 0, 0.5f}, {0, 0, 0, 0, 0, 0.5f}, {0, 0, 0, 0, 0, 0.5f}};
  for (std::size_t round = 0; round < 3; ++round) {
    const auto& xa = round == 0 ? ga : za;
    const auto& xb = round == 0 ? gb : zb;
    w1.push({"a", "b"}, {{za.data(), {4}}, {zb.data(), {6}}});
    w0.wait(w0.push({"a", "b"}, {{xa.data(), {4}}, {xb.data(), {6}}}));
    w0.wait(w0.pull({"a", "b"}, {{a.data(), {4}}, {b.data(), {6}}}));
    w1.wait_all();
    BOOST_TEST(a == want_a[round], boost::test_tools::per_element());
    BOOST_TEST(b == want_b[round], boost::test_tools::per_element());
  }
  // One message per call: 2-bit is 4 + ceil(n / 4) bytes per key of at most 1024 elements (5 + 6), fp16 2 per float.
  const auto moved = w0.transfers();
  BOOST_TEST(moved.shared_memory_calls == 0u);
  BOOST_TEST(moved.network_calls == 6u);
  BOOST_TEST(moved.network_bytes == 3u * 11u + 3u * 20u);
}
