// Tests for actors/lone_shard.cpp under CAF's deterministic scheduler: the stand-in
// coordinator welcomes a shard as shard 0 with one key range of the size asked for, and
// refuses members with a typed error.
#define BOOST_TEST_MODULE lone_shard
#include <boost/test/unit_test.hpp>

#include "actors/lone_shard.hpp"
#include "tests/support/caf_fixture.hpp"
#include "tests/support/tiny_job.hpp"

using namespace troupe;

BOOST_FIXTURE_TEST_CASE(welcomes_one_shard_and_refuses_members, test::deterministic_system) {
  auto coord = own(spawn_welcome_only_coordinator(*sys, test::tiny_job(sync_mode::async), 15));
  std::optional<shard_welcome> welcome;
  caf::error refused;
  sys->spawn([&, coord](caf::event_based_actor* self) {
    self->request(coord, caf::infinite, join_atom::value, shard_join{"job-under-test", {}, 0})
        .then([&](shard_welcome& w) { welcome = std::move(w); });
    self->request(coord, caf::infinite, join_atom::value, worker_join{"job-under-test", {}, 0, {}})
        .then([](const worker_welcome&) {}, [&](caf::error& e) { refused = e; });
  });
  sched->run();
  BOOST_REQUIRE(welcome.has_value());
  BOOST_TEST(welcome->index == 0u);
  BOOST_REQUIRE_EQUAL(welcome->ranges.size(), 1u);
  BOOST_TEST(welcome->ranges[0].length == 15);
  BOOST_TEST(welcome->job.train.model == "mlp:4-3");
  BOOST_TEST((troupe_code(refused) == errc::cluster_full));
}
