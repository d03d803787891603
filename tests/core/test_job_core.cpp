// Tests for core/job_core.cpp (admission, the start, replacing a lost worker), stepped by
// hand with explicit time (tests/support/job_core_harness.hpp): admission waits for every
// shard and member, grants the ranks members ask for while free, refuses foreign and
// extra nodes, and names neighbours by address across nodes; a lost worker is replaced by
// one standing by or rejoining (in sync a little ahead of the fastest); the staleness
// bound is exported only by modes that have one.
#define BOOST_TEST_MODULE job_core
#include <boost/test/unit_test.hpp>

#include <map>
#include <optional>
#include <sstream>

#include "tests/support/job_core_harness.hpp"

using namespace troupe;
using namespace troupe::test::job_core_tests;
using test::all_of;
using test::only;

BOOST_AUTO_TEST_CASE(admission_waits_for_every_shard_and_member_then_starts) {
  harness h(tiny_job(sync_mode::async));
  const auto first = h.shard();
  BOOST_TEST(only<welcome_shard>(first).welcome.index == 0u);
  BOOST_TEST(only<welcome_shard>(first).welcome.ranges.size() > 0u);
  BOOST_TEST(only<assign_rank>(h.member()).rank == 0u);
  BOOST_TEST(all_of<start_shards>(h.member()).empty());  // the second shard is missing
  BOOST_TEST((h.core->phase() == job_phase::admitting));
  const auto second = h.shard();
  BOOST_TEST(only<welcome_shard>(second).welcome.index == 1u);
  const auto start = only<start_shards>(second);  // after the welcome: same order on the wire
  BOOST_TEST((std::holds_alternative<welcome_shard>(second.front())));
  BOOST_TEST((start.members.workers == std::vector<std::uint32_t>{0, 1}));
  BOOST_TEST((h.core->phase() == job_phase::starting));
  const auto welcomes = all_of<welcome_member>(h.core->shards_started(h.now));
  BOOST_REQUIRE_EQUAL(welcomes.size(), 2u);
  BOOST_TEST(welcomes[1].assignment.rank == 1u);
  BOOST_TEST(welcomes[1].assignment.world == 2u);
  BOOST_TEST(welcomes[1].assignment.table.shards() == 2u);
  BOOST_TEST(welcomes[1].assignment.resume_clock == 0);
  BOOST_TEST((h.core->phase() == job_phase::training));
}

// A launched worker asks for its index as its rank, so launch's "[worker 2]" is the job's
// worker 2 whatever order they join in; a rank that is taken or not the job's gives the
// lowest free one. The welcomes carry the ranks assigned, with each member's own address.
BOOST_AUTO_TEST_CASE(members_get_the_ranks_they_ask_for_while_free) {
  harness h(tiny_job(sync_mode::async, 4, 1));
  h.shard();
  BOOST_TEST(only<assign_rank>(h.member_asking_for(2, "host-2")).rank == 2u);
  BOOST_TEST(only<assign_rank>(h.member_asking_for(2, "host-2b")).rank == 0u);  // taken: the lowest free
  BOOST_TEST(only<assign_rank>(h.member_asking_for(9, "host-9")).rank == 1u);   // not one of the job's
  const auto last = h.member_asking_for(-1, "host-any");
  BOOST_TEST(only<assign_rank>(last).rank == 3u);
  BOOST_TEST((only<start_shards>(last).members.workers == std::vector<std::uint32_t>{0, 1, 2, 3}));
  const auto welcomes = all_of<welcome_member>(h.core->shards_started(h.now));
  BOOST_REQUIRE_EQUAL(welcomes.size(), 4u);
  std::map<std::uint32_t, ticket> by_rank;
  for (const auto& w : welcomes) by_rank[w.assignment.rank] = w.t;
  BOOST_TEST(by_rank.size() == 4u);
  BOOST_TEST(by_rank[2] == 2u);  // tickets count from 1: the shard was 1, the first member 2
  BOOST_TEST(by_rank[0] == 3u);
  BOOST_TEST(by_rank[1] == 4u);
  BOOST_TEST(by_rank[3] == 5u);
}

// In a pipeline each member learns its neighbours' addresses by rank, so a member that
// joined first under a higher rank is still found by its neighbour.
BOOST_AUTO_TEST_CASE(pipeline_neighbours_follow_the_ranks_asked_for) {
  job_spec j = tiny_job(sync_mode::sync, 1, 1);
  j.pipeline_stages = 2;
  j.microbatches = 2;
  j.cuts = {1};
  harness h(j);
  h.shard();
  h.member_asking_for(1, "stage-1");
  h.member_asking_for(0, "stage-0");
  const auto welcomes = all_of<welcome_member>(h.core->shards_started(h.now));
  BOOST_REQUIRE_EQUAL(welcomes.size(), 2u);
  for (const auto& w : welcomes) {
    if (w.assignment.rank == 0) BOOST_TEST(w.assignment.next_host == "stage-1");
    if (w.assignment.rank == 1) BOOST_TEST(w.assignment.prev_host == "stage-0");
  }
}

BOOST_AUTO_TEST_CASE(foreign_and_extra_nodes_are_refused) {
  harness h(tiny_job(sync_mode::async));
  const auto foreign = only<refuse>(h.shard({}, 0, "another-job"));
  BOOST_TEST((foreign.why.code == errc::bad_job));
  BOOST_TEST(foreign.why.detail.find("'another-job'") != std::string::npos);
  BOOST_TEST((only<refuse>(h.member({}, 0, "another-job")).why.code == errc::bad_job));
  h.start();
  BOOST_TEST((only<refuse>(h.shard()).why.code == errc::cluster_full));
  harness p(tiny_job(sync_mode::sync));
  p.job.pipeline_stages = 2;
  p.core = std::make_unique<job_core>(p.job, p.m, observability{}, p.now);
  p.start();
  const auto stage = only<refuse>(p.member());
  BOOST_TEST(stage.why.detail.find("a pipeline stage cannot be replaced") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(across_nodes_the_welcome_names_shards_and_neighbours_by_address) {
  harness h(tiny_job(sync_mode::sync, 1, 1));
  h.job.pipeline_stages = 3;
  h.core = std::make_unique<job_core>(h.job, h.m, observability{}, h.now);
  h.shard("10.0.0.1", 7001);
  for (std::uint16_t r = 0; r < 3; ++r) h.member("10.0.0." + std::to_string(2 + r), 7100 + r);
  const auto welcomes = all_of<welcome_member>(h.core->shards_started(h.now));
  BOOST_REQUIRE_EQUAL(welcomes.size(), 3u);
  const member_assignment& middle = welcomes[1].assignment;
  BOOST_TEST((middle.shard_hosts == std::vector<std::string>{"10.0.0.1"}));
  BOOST_TEST(middle.shard_ports[0] == 7001);
  BOOST_TEST(middle.prev_host == "10.0.0.2");
  BOOST_TEST(middle.prev_port == 7100);
  BOOST_TEST(middle.next_host == "10.0.0.4");
  BOOST_TEST(middle.next_port == 7102);
  BOOST_TEST(welcomes[0].assignment.prev_host.empty());
  BOOST_TEST(welcomes[2].assignment.next_host.empty());
}

// Note [Ring connections]: each member learns where the same stage of the replicas before
// and after it in the ring listen; in one process (no addresses) the shell gives handles.
BOOST_AUTO_TEST_CASE(in_allreduce_the_welcome_names_the_ring_neighbours_and_no_one_rejoins) {
  harness h(tiny_job(sync_mode::allreduce, 3, 0));
  std::vector<welcome_member> welcomes;
  for (std::uint16_t r = 0; r < 3; ++r) {
    const auto out = h.member("10.0.0." + std::to_string(2 + r), 7100 + r);
    for (const auto& w : all_of<welcome_member>(out)) welcomes.push_back(w);
  }
  BOOST_REQUIRE_EQUAL(welcomes.size(), 3u);  // no shards to start first
  for (const auto& w : welcomes) {
    const std::uint32_t r = w.assignment.rank;
    BOOST_TEST_CONTEXT("worker " << r) {
      BOOST_TEST(w.assignment.ring_prev_host == "10.0.0." + std::to_string(2 + (r + 2) % 3));
      BOOST_TEST(w.assignment.ring_prev_port == 7100 + (r + 2) % 3);
      BOOST_TEST(w.assignment.ring_next_host == "10.0.0." + std::to_string(2 + (r + 1) % 3));
      BOOST_TEST(w.assignment.ring_next_port == 7100 + (r + 1) % 3);
      BOOST_TEST(w.assignment.shard_hosts.empty());
    }
  }
  BOOST_TEST(only<refuse>(h.member()).why.detail.find("--mode allreduce") != std::string::npos);
  harness sync(tiny_job(sync_mode::sync, 3));
  for (const auto& w : sync.start()) BOOST_TEST(w.assignment.ring_next_host.empty());
}

// Note [Rings of leaders]: with --local-reduce the ring holds each local group's leader
// (and a worker alone on its node); the others get the ring but no seat in it.
BOOST_AUTO_TEST_CASE(with_local_groups_the_ring_holds_their_leaders) {
  job_spec job = tiny_job(sync_mode::allreduce, 5, 0);
  job.local_reduce = true;
  harness h(job);
  std::vector<welcome_member> welcomes;
  const char* nodes[] = {"cuda@a", "cuda@a", "cuda@b", "cuda@b", "cuda@c"};
  for (std::uint16_t r = 0; r < 5; ++r) {
    const auto out = h.member("10.0.0." + std::to_string(2 + r), 7100 + r, "job-under-test", nodes[r], r);
    for (const auto& w : all_of<welcome_member>(out)) welcomes.push_back(w);
  }
  BOOST_REQUIRE_EQUAL(welcomes.size(), 5u);
  for (const auto& w : welcomes) {
    const member_assignment& a = w.assignment;
    BOOST_TEST_CONTEXT("worker " << a.rank) {
      BOOST_TEST((a.ring == std::vector<std::uint32_t>{0, 2, 4}));
      const bool leads = a.rank % 2 == 0;
      BOOST_TEST(a.ring_next_host == (leads ? "10.0.0." + std::to_string(2 + (a.rank + 2) % 6) : std::string()));
      BOOST_TEST(a.ring_prev_host == (leads ? "10.0.0." + std::to_string(2 + (a.rank + 4) % 6) : std::string()));
      if (leads) BOOST_TEST(a.ring_next_port == 7100 + (a.rank + 2) % 6);
      if (a.rank == 3) BOOST_TEST((a.group == std::vector<std::uint32_t>{2, 3}));
      if (a.rank == 4) BOOST_TEST(a.group.empty());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_member_standing_by_replaces_the_first_to_die) {
  harness h(tiny_job(sync_mode::async));
  h.start();
  h.step(0, 5, 0);
  h.step(1, 3, 0);
  const auto standby = h.member();
  BOOST_TEST(all_of<assign_rank>(standby).empty());
  BOOST_TEST(only<note>(standby).text.find("stands by") != std::string::npos);
  const auto lost = h.core->on_member_down(1, std::nullopt, "killed", h.now);
  BOOST_TEST(all_of<note>(lost)[0].text.find("worker 1 is gone (killed)") != std::string::npos);
  BOOST_TEST(only<remove_from_shards>(lost).rank == 1u);
  BOOST_TEST(only<assign_rank>(lost).rank == 1u);
  const auto add = only<add_to_shards>(lost);
  BOOST_TEST(add.rank == 1u);
  BOOST_TEST(add.clock == 5);  // async: level with the slowest live worker (only worker 0 lives)
  BOOST_TEST(all_of<welcome_member>(lost).empty());  // not before every shard has added it
  const auto welcome = only<welcome_member>(h.core->member_added(1, h.now));
  BOOST_TEST(welcome.assignment.rank == 1u);
  BOOST_TEST(welcome.assignment.resume_clock == 5);
}

BOOST_AUTO_TEST_CASE(in_sync_a_rejoining_worker_starts_two_rounds_ahead_of_the_fastest) {
  harness h(tiny_job(sync_mode::sync, 3));
  h.start();
  h.step(0, 7, 0);
  h.step(1, 7, 0);
  h.step(2, 6, 0);
  h.core->on_member_down(2, std::nullopt, "killed", h.now);
  const auto add = only<add_to_shards>(h.member());
  BOOST_TEST(add.rank == 2u);
  BOOST_TEST(add.clock == 9);
  const auto local = tiny_job(sync_mode::sync);
  harness g(local);
  g.job.local_reduce = true;
  g.core = std::make_unique<job_core>(g.job, g.m, observability{}, g.now);
  g.start();
  BOOST_TEST(only<refuse>(g.member()).why.detail.find("--local-reduce") != std::string::npos);
}

// An async job has no staleness bound, so it exports none (an alert comparing with it
// would fire on every healthy async job); sync exports 0 and ssp (2s + 2) * members.
BOOST_AUTO_TEST_CASE(the_staleness_bound_is_exported_only_by_modes_that_have_one) {
  auto bound_of = [](sync_mode mode) -> std::optional<double> {
    observability obs;
    obs.metrics = std::make_shared<monitoring::registry>("job-bound");
    harness h(tiny_job(mode, 3), obs);
    std::istringstream scrape(obs.metrics->scrape());
    for (std::string line; std::getline(scrape, line);)
      if (line.rfind("troupe_staleness_bound{", 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
    return std::nullopt;
  };
  BOOST_TEST(!bound_of(sync_mode::async).has_value());
  BOOST_TEST(bound_of(sync_mode::sync).value_or(-1) == 0);
  const auto ssp = tiny_job(sync_mode::ssp, 3);
  BOOST_TEST(bound_of(sync_mode::ssp).value_or(-1) == static_cast<double>((2 * ssp.staleness + 2) * 3));
}
