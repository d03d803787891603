// Tests for actors/shard_server.cpp under CAF's deterministic scheduler: the shard joins,
// refuses work before it starts, holds sync pulls in response promises until the round
// closes, answers bad gradients with typed errors without touching its parameters, and
// releases a leaver's round.
#define BOOST_TEST_MODULE shard_server
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <limits>

#include "actors/lone_shard.hpp"
#include "actors/shard_server.hpp"
#include "tests/support/caf_fixture.hpp"
#include "tests/support/tiny_job.hpp"

using namespace troupe;

namespace {

// All 15 parameters of tiny_job's model on the one shard; plain SGD at lr 1.
job_spec tiny_job(sync_mode mode) {
  job_spec j = test::tiny_job(mode, 2, 1);
  j.train.lr = 1.f;
  j.train.warmup_epochs = 0.f;
  j.train.schedule = lr_schedule_kind::constant;
  j.train.optimizer = optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f};
  return j;
}

constexpr std::int64_t numel = 15;

struct recorder {
  std::vector<push_ack> acks;
  std::vector<params_reply> params;
  std::vector<caf::error> errors;
};

tensor filled(float v) {
  tensor t({numel});
  for (std::int64_t i = 0; i < numel; ++i) t.data<float>()[i] = v;
  return t;
}

struct fixture : test::deterministic_system {
  shard_actor shard;
  recorder rec;

  void boot(sync_mode mode) {
    auto coord = own(spawn_welcome_only_coordinator(*sys, tiny_job(mode), numel));
    auto local = own(spawn_shard_server(*sys, coord, "job-under-test", std::chrono::seconds(10)));
    join_as_shard(local, {}, 0);
    shard = local;
    sched->run();
  }
  void start(std::vector<std::uint32_t> workers) {
    auto s = shard;
    sys->spawn([s, workers](caf::event_based_actor* self) {
      self->request(s, caf::infinite, start_atom::value, membership{workers, {}}).then([](caf::ok_atom) {});
    });
    sched->run();
  }
  void push(std::uint32_t worker, std::int64_t clock, tensor g) {
    auto s = shard;
    auto* r = &rec;
    sys->spawn([=](caf::event_based_actor* self) {
      self->request(s, caf::infinite, push_atom::value, push_grads{0, worker, clock, clock, g})
          .then([=](const push_ack& a) { r->acks.push_back(a); }, [=](caf::error& e) { r->errors.push_back(e); });
    });
  }
  void pull(std::uint32_t worker, std::int64_t clock) {
    auto s = shard;
    auto* r = &rec;
    sys->spawn([=](caf::event_based_actor* self) {
      self->request(s, caf::infinite, pull_atom::value, pull_request{0, worker, clock})
          .then([=](params_reply& p) { r->params.push_back(std::move(p)); },
                [=](caf::error& e) { r->errors.push_back(e); });
    });
  }
  params_reply snapshot() {
    params_reply out;
    auto s = shard;
    sys->spawn([=, &out](caf::event_based_actor* self) {
      self->request(s, caf::infinite, snapshot_atom::value).then([&out](params_reply& p) { out = std::move(p); });
    });
    sched->run();
    return out;
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(refuses_work_before_start, fixture) {
  boot(sync_mode::sync);
  push(0, 0, filled(1.f));
  pull(0, 0);
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 2u);
  for (auto& e : rec.errors) BOOST_TEST((troupe_code(e) == errc::not_started));
}

BOOST_FIXTURE_TEST_CASE(sync_pull_is_held_until_the_round_closes, fixture) {
  boot(sync_mode::sync);
  start({0, 1});
  const params_reply initial = snapshot();
  pull(0, 0);
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 1u);  // clock 0 is served at once
  push(0, 0, filled(2.f));
  pull(0, 1);
  sched->run();
  BOOST_TEST(rec.params.size() == 1u);     // held: worker 1 has not pushed round 0
  BOOST_TEST(rec.acks.size() == 1u);
  push(1, 0, filled(4.f));
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 2u);  // released by the round's close
  const params_reply& after = rec.params[1];
  BOOST_TEST(after.version == 1);
  for (std::int64_t i = 0; i < numel; ++i)
    BOOST_TEST(after.params.data<float>()[i] == initial.params.data<float>()[i] - 6.f);
}

BOOST_FIXTURE_TEST_CASE(bad_gradients_get_typed_errors_and_change_nothing, fixture) {
  boot(sync_mode::async);
  start({0, 1});
  const params_reply before = snapshot();
  tensor nan = filled(1.f);
  nan.data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  push(0, 0, nan);
  push(0, 1, tensor({numel + 3}));
  push(5, 0, filled(1.f));
  sched->run();
  // A push for another shard.
  auto s = shard;
  auto* r = &rec;
  sys->spawn([=](caf::event_based_actor* self) {
    self->request(s, caf::infinite, push_atom::value, push_grads{3, 1, 0, 0, filled(1.f)})
        .then([](const push_ack&) {}, [=](caf::error& e) { r->errors.push_back(e); });
  });
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 4u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::not_finite));
  BOOST_TEST((troupe_code(rec.errors[1]) == errc::bad_shape));
  BOOST_TEST((troupe_code(rec.errors[2]) == errc::not_member));
  BOOST_TEST((troupe_code(rec.errors[3]) == errc::bad_shard));
  BOOST_TEST(rec.acks.empty());
  const params_reply after = snapshot();
  BOOST_TEST(after.version == before.version);
  BOOST_TEST(std::memcmp(after.params.bytes(), before.params.bytes(), before.params.nbytes()) == 0);
}

BOOST_FIXTURE_TEST_CASE(a_leaver_releases_the_round_and_its_own_pull_fails, fixture) {
  boot(sync_mode::sync);
  start({0, 1});
  push(0, 0, filled(2.f));
  pull(0, 1);
  pull(1, 1);
  sched->run();
  BOOST_TEST(rec.params.empty());
  caf::anon_send(shard, left_atom::value, std::uint32_t{1});
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 1u);
  BOOST_TEST(rec.params[0].version == 1);
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::not_member));
}

BOOST_FIXTURE_TEST_CASE(stats_report_counters, fixture) {
  boot(sync_mode::async);
  start({0, 1});
  push(0, 0, filled(1.f));
  push(1, 0, filled(1.f));
  sched->run();
  shard_stats st;
  auto s = shard;
  sys->spawn([=, &st](caf::event_based_actor* self) {
    self->request(s, caf::infinite, stats_atom::value).then([&st](shard_stats& x) { st = x; });
  });
  sched->run();
  BOOST_TEST(st.updates == 2);
  BOOST_TEST(st.version == 2);
  BOOST_TEST(st.staleness_count == 2);
  BOOST_TEST(st.staleness_sum == 1);  // the second push was computed on version 0
}
