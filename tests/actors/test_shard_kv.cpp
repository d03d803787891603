// Tests for actors/shard_kv.cpp: a shard server of a key-value job (with the kv
// coordinator, in one process) takes well-formed pushes and pulls of a member, and
// refuses, with a typed error naming what is wrong and without changing the key, a push
// whose data does not match its parts, a push or pull of a part it does not hold, one
// addressed to another shard, rows outside the part, and a gradient that is not finite.
// The member is a scoped actor that speaks the protocol directly, as a faulty or
// hand-written client would; the store (client/) never sends these.
#define BOOST_TEST_MODULE shard_kv
#include <boost/test/unit_test.hpp>

#include <limits>
#include <optional>

#include "actors/kv_coordinator.hpp"
#include "actors/runtime.hpp"
#include "actors/shard_server.hpp"

using namespace troupe;

namespace {

constexpr auto timeout = std::chrono::seconds(5);
constexpr std::int64_t n = 8;
const kv_part_id part = make_part_id(0, 0);

tensor filled(std::int64_t count, float v) {
  tensor t({count});
  for (std::int64_t i = 0; i < count; ++i) t.data<float>()[i] = v;
  return t;
}

// One member, one shard, async, no optimizer on the shard; key "w" of 8 ones defined.
struct kv_job {
  kv_job() {
    configure_in_process(cfg);
    sys.emplace(cfg);
    job_spec job;
    job.kv = true;
    job.job_id = "kv-test";
    job.mode = sync_mode::async;
    job.workers = 1;
    job.servers = 1;
    job.request_timeout_ms = 5000;
    coordinator = spawn_kv_coordinator(*sys, job, {});
    shard_server = spawn_shard_server(*sys, coordinator, "kv-test", timeout);
    join_as_shard(shard_server, "", 0);
    member.emplace(*sys);
    (*member)->request(coordinator, timeout, join_atom::value, worker_join{"kv-test", {}, 0, {}, {}})
        .receive([&](worker_welcome& w) { shard = w.shards.at(0); },
                 [&](caf::error& e) { BOOST_FAIL("the member did not join: " << describe(e)); });
    (*member)->request(coordinator, timeout, kv_init_atom::value, kv_init{0, "s:w", {n}, filled(n, 1.f), 0})
        .receive([&](kv_key_layout& k) { BOOST_REQUIRE_EQUAL(k.parts.size(), 1u); },
                 [&](caf::error& e) { BOOST_FAIL("key w was not defined: " << describe(e)); });
  }
  ~kv_job() {
    member.reset();
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(shard_server, caf::exit_reason::user_shutdown);
  }

  // The push's outcome: nullopt when acknowledged, else the error's code and text.
  std::optional<std::pair<errc, std::string>> push(kv_push p) {
    std::optional<std::pair<errc, std::string>> out;
    (*member)->request(shard, timeout, push_atom::value, std::move(p))
        .receive([](kv_push_ack&) {},
                 [&](caf::error& e) { out.emplace(troupe_code(e).value_or(errc::bad_job), describe(e)); });
    return out;
  }
  std::optional<std::pair<errc, std::string>> pull(kv_pull r, tensor* values = nullptr) {
    std::optional<std::pair<errc, std::string>> out;
    (*member)->request(shard, timeout, pull_atom::value, std::move(r))
        .receive(
            [&](kv_pull_reply& reply) {
              if (values) *values = std::move(reply.data);
            },
            [&](caf::error& e) { out.emplace(troupe_code(e).value_or(errc::bad_job), describe(e)); });
    return out;
  }
  // Key w's values, pulled whole.
  tensor values() {
    tensor t;
    BOOST_REQUIRE(!pull(kv_pull{0, 0, {part}, {{}}, {0}}, &t));
    return t;
  }

  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  local_coordinator_actor coordinator;
  local_shard_actor shard_server;
  shard_actor shard;
  std::optional<caf::scoped_actor> member;
};

bool all_equal(const tensor& t, float v) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (t.data<float>()[i] != v) return false;
  return t.numel() == n;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_well_formed_push_and_pull_go_through, kv_job) {
  BOOST_TEST(!push(kv_push{0, 0, {part}, {0}, filled(n, 3.f)}));
  BOOST_TEST(all_equal(values(), 3.f));  // no optimizer: async keeps the latest gradient
  tensor rows;
  BOOST_TEST(!pull(kv_pull{0, 0, {part}, {{2, 5}}, {1}}, &rows));
  BOOST_TEST(rows.numel() == 2);
}

BOOST_FIXTURE_TEST_CASE(a_push_whose_data_does_not_match_its_parts_is_malformed, kv_job) {
  auto e = push(kv_push{0, 0, {part}, {0}, filled(5, 3.f)});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::malformed));
  BOOST_TEST(e->second.find("carries 5 values") != std::string::npos);
  auto no_versions = push(kv_push{0, 0, {part}, {}, filled(n, 3.f)});
  BOOST_REQUIRE(no_versions);
  BOOST_TEST((no_versions->first == errc::malformed));
  BOOST_TEST(all_equal(values(), 1.f));
}

BOOST_FIXTURE_TEST_CASE(parts_it_does_not_hold_and_other_shards_messages_are_refused, kv_job) {
  auto e = push(kv_push{0, 0, {make_part_id(7, 0)}, {0}, filled(n, 3.f)});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::bad_shard));
  BOOST_TEST(e->second.find("is not on this shard") != std::string::npos);
  auto p = pull(kv_pull{0, 0, {make_part_id(7, 0)}, {{}}, {0}});
  BOOST_REQUIRE(p);
  BOOST_TEST((p->first == errc::bad_shard));
  auto elsewhere = push(kv_push{3, 0, {part}, {0}, filled(n, 3.f)});
  BOOST_REQUIRE(elsewhere);
  BOOST_TEST((elsewhere->first == errc::bad_shard));
  BOOST_TEST(elsewhere->second.find("for shard 3") != std::string::npos);
  BOOST_TEST(all_equal(values(), 1.f));
}

BOOST_FIXTURE_TEST_CASE(rows_outside_the_part_are_refused, kv_job) {
  auto e = pull(kv_pull{0, 0, {part}, {{8}}, {1}});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::bad_shape));
  BOOST_TEST(e->second.find("row 8, outside its part") != std::string::npos);
  auto mismatched = pull(kv_pull{0, 0, {part}, {}, {}});
  BOOST_REQUIRE(mismatched);
  BOOST_TEST((mismatched->first == errc::malformed));
}

BOOST_FIXTURE_TEST_CASE(a_gradient_that_is_not_finite_changes_nothing, kv_job) {
  tensor g = filled(n, 3.f);
  g.data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  auto e = push(kv_push{0, 0, {part}, {0}, std::move(g)});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::not_finite));
  BOOST_TEST(all_equal(values(), 1.f));
}
