// Tests for actors/lone_shard.cpp under CAF's deterministic scheduler: the stand-in
// coordinator welcomes one shard as shard 0 with one key range of the size asked for,
// admits the job's members in order and starts the shard with them, and refuses a second
// shard and one member too many with typed errors.
#define BOOST_TEST_MODULE lone_shard
#include <boost/test/unit_test.hpp>

#include "actors/lone_shard.hpp"
#include "actors/shard_server.hpp"
#include "tests/support/caf_fixture.hpp"
#include "tests/support/tiny_job.hpp"

using namespace troupe;

BOOST_FIXTURE_TEST_CASE(welcomes_one_shard_then_the_job_s_members, test::deterministic_system) {
  const job_spec job = test::tiny_job(sync_mode::async, 2, 1);
  auto coord = own(spawn_lone_coordinator(*sys, job, 15));
  std::optional<shard_welcome> welcome;
  caf::error second_shard;
  sys->spawn([&, coord](caf::event_based_actor* self) {
    self->request(coord, caf::infinite, join_atom::value, shard_join{"job-under-test", {}, 0, {}})
        .then([&](shard_welcome& w) { welcome = std::move(w); });
    self->request(coord, caf::infinite, join_atom::value, shard_join{"job-under-test", {}, 0, {}})
        .then([](const shard_welcome&) {}, [&](caf::error& e) { second_shard = e; });
  });
  sched->run();
  BOOST_REQUIRE(welcome.has_value());
  BOOST_TEST(welcome->index == 0u);
  BOOST_REQUIRE_EQUAL(welcome->ranges.size(), 1u);
  BOOST_TEST(welcome->ranges[0].length == 15);
  BOOST_TEST(welcome->job.train.model == "mlp:4-3");
  BOOST_TEST((troupe_code(second_shard) == errc::cluster_full));
}

BOOST_FIXTURE_TEST_CASE(starts_the_shard_once_every_member_joined, test::deterministic_system) {
  const job_spec job = test::tiny_job(sync_mode::async, 2, 1);
  auto coord = own(spawn_lone_coordinator(*sys, job, 15));
  auto shard = own(spawn_shard_server(*sys, coord, "job-under-test", std::chrono::seconds(10)));
  join_as_shard(shard, {}, 0);
  sched->run();
  std::vector<worker_welcome> welcomes;
  caf::error third;
  for (int i = 0; i < 3; ++i)
    sys->spawn([&, coord](caf::event_based_actor* self) {
      self->request(coord, caf::infinite, join_atom::value, worker_join{"job-under-test", {}, 0, {}, {}, -1})
          .then([&](worker_welcome& w) { welcomes.push_back(std::move(w)); }, [&](caf::error& e) { third = e; });
    });
  sched->run();
  BOOST_REQUIRE_EQUAL(welcomes.size(), 2u);
  BOOST_TEST(welcomes[0].place.rank == 0u);
  BOOST_TEST(welcomes[1].place.rank == 1u);
  BOOST_REQUIRE_EQUAL(welcomes[0].shards.size(), 1u);
  BOOST_TEST((welcomes[0].shards[0] == shard_actor{shard}));
  BOOST_TEST((troupe_code(third) == errc::cluster_full));
  // Started: a shard that had not would refuse with not_started.
  std::optional<shard_stats> stats;
  caf::error stats_error;
  sys->spawn([&, coord](caf::event_based_actor* self) {
    self->request(coord, caf::infinite, lone_stats{})
        .then([&](shard_stats& s) { stats = s; }, [&](caf::error& e) { stats_error = e; });
  });
  sched->run();
  BOOST_TEST(stats.has_value(), describe(stats_error));
}
