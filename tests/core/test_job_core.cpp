// Tests for core/job_core.cpp, job_watch.cpp and job_epochs.cpp, stepped by hand without
// actors or threads, with explicit time: admission waits for every shard and member,
// refuses foreign and extra nodes, and names neighbours; a lost worker is replaced by one
// standing by or rejoining (in sync a little ahead of the fastest); epochs close when
// every live member has reported them (the last only after training), through the
// shards' statistics and an evaluation, into the job's result; a dead shard, a diverged
// member, losing every member, a bad snapshot and a stall end the job with their typed
// errors; local group ids are relayed only from their leader; the step rates name a
// straggler.
#define BOOST_TEST_MODULE job_core
#include <boost/test/unit_test.hpp>

#include <map>
#include <optional>
#include <sstream>

#include "core/job_core.hpp"
#include "tests/support/actions.hpp"
#include "tests/support/tiny_job.hpp"

using namespace troupe;
using namespace job_actions;
using test::all_of;
using test::only;
using std::chrono::milliseconds;

namespace {

job_spec tiny_job(sync_mode mode, std::uint32_t workers = 2, std::uint32_t servers = 2) {
  job_spec j = test::tiny_job(mode, workers, servers);
  j.stall_timeout_ms = 5000;
  return j;
}

// The job's outcome from a finish action: its result, or the fault's text.
std::string fault_of(const job_actions_list& actions) {
  const auto f = only<finish>(actions);
  BOOST_REQUIRE(std::holds_alternative<fault>(f.outcome));
  return to_string(std::get<fault>(f.outcome));
}

struct harness {
  job_spec job;
  model m;
  job_clock::time_point now = job_clock::time_point{} + std::chrono::hours(1);
  std::unique_ptr<job_core> core;
  ticket next = 1;

  explicit harness(job_spec j, observability obs = {}) : job(std::move(j)), m(*build_model(job)) {
    core = std::make_unique<job_core>(job, m, std::move(obs), now);
  }
  void later(milliseconds d) { now += d; }
  job_actions_list shard(std::string host = {}, std::uint16_t port = 0, std::string id = "job-under-test") {
    return core->on_shard_join(next++, shard_join{std::move(id), std::move(host), port, {}}, now);
  }
  job_actions_list member(std::string host = {}, std::uint16_t port = 0, std::string id = "job-under-test",
                          std::string locality = {}, std::int32_t wanted_rank = -1) {
    return core->on_member_join(
        next++, worker_join{std::move(id), std::move(host), port, std::move(locality), {}, wanted_rank}, now);
  }
  job_actions_list member_asking_for(std::int32_t rank, std::string host = {}) {
    return member(std::move(host), 0, "job-under-test", {}, rank);
  }
  // Every shard and member joins and the shards start; returns the members' welcomes.
  std::vector<welcome_member> start() {
    for (std::uint32_t s = 0; s < job.servers; ++s) shard();
    for (std::uint32_t r = 0; r < members(job); ++r) member();
    auto go = core->shards_started(now);
    return all_of<welcome_member>(go);
  }
  job_actions_list step(std::uint32_t rank, std::int64_t clock, std::int32_t epoch, std::int64_t samples = 50) {
    return core->on_step(step_report{rank, clock, epoch, 0.5, samples, 0.0, 0, 0}, now);
  }
  job_actions_list epoch(std::uint32_t rank, std::int32_t e) {
    return core->on_epoch(worker_epoch{rank, e, 0.5, 1, 50, 0.01, tensor()}, now);
  }
  job_actions_list done(std::uint32_t rank, std::int64_t clock) {
    return core->on_done(worker_done{rank, clock, 0, 1}, now);
  }
  // Answers a gather as the shards would: statistics, and snapshots of the right size.
  job_actions_list answer(const gather& g, std::int64_t staleness_sum = 0, std::int64_t count = 0) {
    job_actions_list out;
    const key_table table = partition_parameters(m, job.servers, job.big_array_bound);
    for (std::uint32_t s = 0; s < job.servers; ++s) {
      shard_stats st;
      st.shard = s;
      st.staleness_sum = staleness_sum;
      st.staleness_count = count;
      auto a = core->on_stats(g.id, st);
      out.insert(out.end(), a.begin(), a.end());
      if (!g.with_params) continue;
      auto b = core->on_snapshot(g.id, s, params_reply{s, 1, tensor({table.shard_numel[s]}), {}});
      out.insert(out.end(), b.begin(), b.end());
    }
    return out;
  }
};

}  // namespace

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

BOOST_AUTO_TEST_CASE(epochs_close_through_statistics_and_evaluation_into_the_result) {
  harness h(tiny_job(sync_mode::async));
  h.start();
  h.later(milliseconds(100));  // loading data: training time starts at the first step
  h.step(0, 1, 0);
  h.step(1, 1, 0);
  BOOST_TEST(all_of<gather>(h.epoch(0, 0)).empty());  // worker 1 has not finished epoch 0
  h.later(milliseconds(1000));
  const auto g0 = only<gather>(h.epoch(1, 0));
  BOOST_TEST(g0.with_params);
  const auto eval0 = only<evaluate>(h.answer(g0, 6, 4));
  BOOST_TEST(eval0.epoch == 0);
  BOOST_TEST(eval0.params.numel() == h.m.num_params());
  const auto closed0 = only<epoch_closed>(h.core->on_evaluated(eval_reply{0, 0.75, 0.6})).summary;
  BOOST_TEST(closed0.evaluated);
  BOOST_TEST(closed0.test_accuracy == 0.75);
  BOOST_TEST(closed0.mean_staleness == 1.5);  // 12 staleness over 8 gradients, two shards
  BOOST_TEST(closed0.samples_per_second == 100.0, boost::test_tools::tolerance(1e-9));  // 100 samples in 1 s
  BOOST_TEST(closed0.live_workers == 2u);
  h.step(0, 2, 1);
  h.step(1, 2, 1);
  h.epoch(0, 1);
  BOOST_TEST(all_of<gather>(h.epoch(1, 1)).empty());  // the last epoch waits for the end of training
  BOOST_TEST(all_of<gather>(h.done(0, 2)).empty());
  h.later(milliseconds(1000));
  const auto g1 = only<gather>(h.done(1, 2));
  BOOST_TEST((h.core->phase() == job_phase::finishing));
  const auto eval1 = only<evaluate>(h.answer(g1, 6, 4));
  const auto last = h.core->on_evaluated(eval_reply{1, 0.875, 0.4});
  BOOST_TEST(only<epoch_closed>(last).summary.mean_staleness == 0.0);  // nothing new since epoch 0
  const auto final_gather = only<gather>(last);
  BOOST_TEST(!final_gather.with_params);
  const auto end = only<finish>(h.answer(final_gather, 6, 4));
  BOOST_REQUIRE(std::holds_alternative<job_result>(end.outcome));
  const job_result& r = std::get<job_result>(end.outcome);
  BOOST_TEST(r.mode == "async");
  BOOST_TEST(r.samples == 200);
  BOOST_TEST(r.test_accuracy == 0.875);
  BOOST_TEST(r.evaluated);
  BOOST_TEST(r.train_seconds == 2.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(r.mean_staleness == 1.5);
  BOOST_TEST(r.workers_lost == 0);
  BOOST_TEST(r.params.numel() == h.m.num_params());
  BOOST_TEST((h.core->phase() == job_phase::finished));
  BOOST_TEST(h.step(0, 3, 1).empty());  // nothing happens after the end
  BOOST_TEST(only<refuse>(h.member()).why.detail == "the job has ended");
}

BOOST_AUTO_TEST_CASE(simulated_compute_closes_epochs_without_parameters_or_evaluation) {
  job_spec job = tiny_job(sync_mode::async, 1, 1);
  job.train.epochs = 1;
  job.simulate_compute_ms = 1;
  harness h(job);
  h.start();
  h.step(0, 1, 0);
  h.epoch(0, 0);
  const auto g = only<gather>(h.done(0, 1));
  BOOST_TEST(!g.with_params);
  const auto closed = h.answer(g);
  BOOST_TEST(!only<epoch_closed>(closed).summary.evaluated);
  const auto end = only<finish>(h.answer(only<gather>(closed)));
  BOOST_TEST(std::get<job_result>(end.outcome).params.empty());
}

BOOST_AUTO_TEST_CASE(with_no_servers_the_stages_report_their_parameters) {
  job_spec job = tiny_job(sync_mode::sync, 1, 0);
  job.train.model = "mlp:4-5-3";
  job.train.epochs = 1;
  job.pipeline_stages = 2;
  job.cuts = {2};
  harness h(job);
  h.start();
  const auto spans = job_stage_spans(h.job, h.m);
  tensor first({spans[0].numel}), second({spans[1].numel});
  first.data<float>()[0] = 3.f;
  second.data<float>()[0] = 4.f;
  h.core->on_epoch(worker_epoch{0, 0, 0, 0, 0, 0.1, first}, h.now);
  h.core->on_epoch(worker_epoch{1, 0, 0.5, 1, 50, 0.1, second}, h.now);
  h.done(0, 1);
  const auto eval = only<evaluate>(h.done(1, 1));  // no shards: nothing to gather from
  BOOST_TEST(eval.params.data<float>()[spans[0].param_offset] == 3.f);
  BOOST_TEST(eval.params.data<float>()[spans[1].param_offset] == 4.f);
  harness bad(job);
  bad.start();
  const auto wrong = bad.core->on_epoch(worker_epoch{1, 0, 0.5, 1, 50, 0.1, tensor({1})}, bad.now);
  BOOST_TEST(fault_of(wrong).find("stage 1 of replica 0 reported 1 f32 parameters, expected") != std::string::npos,
             fault_of(wrong));
  harness ints(job);
  ints.start();
  const auto typed = ints.core->on_epoch(worker_epoch{1, 0, 0.5, 1, 50, 0.1, tensor({spans[1].numel}, dtype::i32)},
                                         ints.now);
  BOOST_TEST(fault_of(typed).find("i32 parameters") != std::string::npos, fault_of(typed));
}

BOOST_AUTO_TEST_CASE(a_bad_snapshot_a_dead_shard_and_a_diverged_member_end_the_job) {
  harness h(tiny_job(sync_mode::async));
  h.start();
  h.epoch(0, 0);
  const auto g = only<gather>(h.epoch(1, 0));
  const auto bad = h.core->on_snapshot(g.id, 1, params_reply{1, 1, tensor({2}), {}});
  BOOST_TEST(fault_of(bad) == "bad_shape: shard 1 sent a snapshot of the wrong size");
  harness d(tiny_job(sync_mode::async));
  d.start();
  const auto dead = d.core->on_shard_down(1, "remote_link_unreachable");
  BOOST_TEST(fault_of(dead).find("shard_lost: shard 1 died (remote_link_unreachable)") == 0u);
  BOOST_TEST(d.core->on_shard_down(0, "again").empty());  // the job has ended once
  harness v(tiny_job(sync_mode::async));
  v.start();
  const auto diverged =
      v.core->on_member_down(0, fault{errc::diverged, "the training loss became nan"}, "diverged: ...", v.now);
  BOOST_TEST(fault_of(diverged) == "diverged: the training loss became nan");
}

BOOST_AUTO_TEST_CASE(losing_every_member_names_the_first_loss) {
  harness h(tiny_job(sync_mode::sync));
  h.start();
  BOOST_TEST(all_of<finish>(h.core->on_member_down(1, std::nullopt, "killed", h.now)).empty());
  BOOST_TEST(h.core->live_members() == 1u);
  const auto end = h.core->on_member_down(0, fault{errc::stage_lost, "x"}, "stage_lost: x", h.now);
  BOOST_TEST(fault_of(end).find("all_workers_lost: every worker died before finishing; the first: worker 1: killed") ==
             0u);
}

BOOST_AUTO_TEST_CASE(the_watchdog_ends_a_stalled_job_naming_who_is_where) {
  harness early(tiny_job(sync_mode::async));
  early.shard();
  early.later(milliseconds(4000));
  BOOST_TEST(early.core->on_tick(early.now).empty());
  early.later(milliseconds(1500));
  BOOST_TEST(fault_of(early.core->on_tick(early.now)) ==
             "stalled: no progress for 5 s (1 of 2 shards and 0 of 2 workers joined)");
  harness h(tiny_job(sync_mode::async));
  h.start();
  h.later(milliseconds(3000));
  h.step(0, 3, 0);  // progress resets the watchdog
  h.later(milliseconds(3000));
  BOOST_TEST(h.core->on_tick(h.now).empty());
  h.later(milliseconds(2500));
  BOOST_TEST(fault_of(h.core->on_tick(h.now)) ==
             "stalled: no progress for 5 s (worker 0 at clock 3, worker 1 at clock 0)");
}

BOOST_AUTO_TEST_CASE(a_local_group_id_is_relayed_only_from_its_leader) {
  job_spec job = tiny_job(sync_mode::sync, 3);
  job.local_reduce = true;
  harness h(job);
  for (std::uint32_t s = 0; s < 2; ++s) h.shard();
  for (int r = 0; r < 3; ++r) h.member({}, 0, "job-under-test", "cpu@host:1");
  const auto go = h.core->shards_started(h.now);
  BOOST_TEST((all_of<welcome_member>(go)[2].assignment.group == std::vector<std::uint32_t>{0, 1, 2}));
  const group_id id{0, {1, 2, 3}};
  const auto relay = only<relay_group_id>(h.core->on_group_id(0, id));
  BOOST_TEST((relay.to == std::vector<std::uint32_t>{1, 2}));
  BOOST_TEST((relay.id.id == std::vector<std::uint8_t>{1, 2, 3}));
  BOOST_TEST(all_of<relay_group_id>(h.core->on_group_id(2, group_id{2, {9}})).empty());  // not a leader
  BOOST_TEST(all_of<relay_group_id>(h.core->on_group_id(1, id)).empty());  // not its sender
}

BOOST_AUTO_TEST_CASE(the_step_rates_name_a_straggler) {
  observability obs;
  obs.metrics = std::make_shared<monitoring::registry>("job-under-test");
  harness h(tiny_job(sync_mode::async, 3), obs);
  h.start();
  for (int t = 1; t <= 3; ++t) {
    h.later(milliseconds(1000));
    h.step(0, 10 * t, 0);
    h.step(1, 10 * t, 0);
    h.step(2, 2 * t, 0);  // a fifth of the others' pace
    BOOST_TEST(h.core->on_tick(h.now).empty());
  }
  std::istringstream scrape(obs.metrics->scrape());
  double straggler = -1, peer = -1;
  for (std::string line; std::getline(scrape, line);) {
    if (line.rfind("troupe_worker_relative_step_rate{", 0) != 0) continue;
    const double v = std::stod(line.substr(line.rfind(' ') + 1));
    if (line.find("rank=\"2\"") != std::string::npos) straggler = v;
    if (line.find("rank=\"1\"") != std::string::npos) peer = v;
  }
  BOOST_TEST(straggler == 0.2, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(peer == 1.0, boost::test_tools::tolerance(1e-9));
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

// Note [Paused processes]: a gap between two ticks longer than paused_gap is time the
// process did not run, not a stall; a stall after the pause is still caught.
BOOST_AUTO_TEST_CASE(the_watchdog_does_not_count_time_the_process_did_not_run) {
  harness h(tiny_job(sync_mode::async));  // stall timeout 5 s
  h.start();
  h.later(milliseconds(1000));
  BOOST_TEST(h.core->on_tick(h.now).empty());
  h.later(job_core::paused_gap + std::chrono::seconds(20));  // stopped with Ctrl-Z for half a minute
  BOOST_TEST(h.core->on_tick(h.now).empty());
  for (int s = 0; s < 3; ++s) {  // running again, and no member makes progress
    h.later(milliseconds(1000));
    BOOST_TEST(h.core->on_tick(h.now).empty());
  }
  h.later(milliseconds(1000));
  BOOST_TEST(fault_of(h.core->on_tick(h.now)).find("stalled: no progress for 5 s") == 0u);
}
