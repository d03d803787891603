// Tests for actors/pipeline_stage.cpp's local groups (--local-reduce, Note [Local groups]
// in core/local_groups.cpp): in sync the workers of one process sum among themselves and
// only the leader talks to the shards, bitwise the plain job's result; a lost member stops
// its group in time; a stranger's group id is ignored. In --mode allreduce (Note [Rings
// of leaders] in core/ring_seats.cpp) workers told they share a node form groups whose
// leaders ring the groups' sums: the job learns what the plain ring learns, reproducibly,
// with the sum or the average over every worker; a killed member ends it in time.
#define BOOST_TEST_MODULE pipeline_stage_groups
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

#include "actors/coordinator.hpp"
#include "actors/pipeline_stage.hpp"
#include "tests/support/jobs.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

// The sum of a counter family's series whose labels include `match`, from a scrape.
double scraped_sum(const std::string& text, const std::string& family, const std::string& match) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(family + "{", 0) == 0 && line.find(match) != std::string::npos)
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

}  // namespace

// --local-reduce in one process: the four workers form one group on the CPU backend, sum
// their gradients among themselves and only the leader talks to the shards; the rank-order
// sum makes the result bitwise the plain sync job's, with a quarter of the pushes.
BOOST_AUTO_TEST_CASE(local_reduce_gives_the_same_parameters_with_one_pusher) {
  auto data = synthetic(2000, 200, 3);
  job_spec job = job_for(sync_mode::sync, 4);
  job.train.batch_size = 50;
  job.train.epochs = 2;
  std::map<bool, job_result> results;
  std::map<bool, double> pushed_bytes;
  for (bool local : {false, true}) {
    job_spec j = job;
    j.local_reduce = local;
    observability obs;
    obs.metrics = std::make_shared<monitoring::registry>("job-local-" + std::to_string(local));
    std::vector<std::string> events;
    job_callbacks cb;
    cb.on_event = [&](const std::string& e) { events.push_back(e); };
    results[local] = run_ok(j, data, cb, obs);
    pushed_bytes[local] = scraped_sum(obs.metrics->scrape(), "troupe_bytes_received_total", "role=\"server\"");
    bool grouped = false;
    for (const auto& e : events) grouped = grouped || e.find("local group at cpu@") != std::string::npos;
    BOOST_TEST(grouped == local);
  }
  BOOST_TEST(same_bits(results[true].params, results[false].params));
  BOOST_TEST(results[true].test_accuracy == results[false].test_accuracy);
  BOOST_TEST(results[true].samples == results[false].samples);
  BOOST_TEST(pushed_bytes[false] > 0);
  BOOST_TEST(pushed_bytes[true] == pushed_bytes[false] / 4);
}

// A worker of a local group that dies takes its group down within --request-timeout (the
// collectives fail instead of waiting for it); here the group is every worker, so the job
// fails, each survivor naming the local group, instead of hanging.
BOOST_AUTO_TEST_CASE(a_lost_group_member_stops_its_group_in_time) {
  job_spec job = job_for(sync_mode::sync, 3);
  job.local_reduce = true;
  job.train.epochs = 40;  // long enough that the kill lands mid-run
  job.request_timeout_ms = 3000;
  live_job live;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = live.run(job, synthetic(4000, 100, 1), [](live_job& j, const epoch_summary& s) {
    if (s.epoch == 0) caf::anon_send_exit(j.handles.workers[2], caf::exit_reason::kill);
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_REQUIRE(!r);
  BOOST_TEST((troupe_code(r.error()) == errc::all_workers_lost), describe(r.error()));
  BOOST_TEST(live.events_with("the local group's") == 2);  // the two survivors, each with the reason
  BOOST_TEST(took < 30.0);
}

// A local group id from anyone but the coordinator is ignored: taken, it would split the
// group (its members opening different communicators) and fail the job.
BOOST_AUTO_TEST_CASE(a_strangers_group_id_is_ignored) {
  job_spec job = job_for(sync_mode::sync, 3);
  job.local_reduce = true;
  job.train.epochs = 1;
  job.request_timeout_ms = 5000;
  live_job live;
  auto data = synthetic(1000, 100, 1);
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE(m.has_value());
  auto h = spawn_job(*live.sys, job, *m, data, {});
  for (const auto& member : h.workers)  // before the real id can arrive
    caf::anon_send(member, group_atom::value, group_id{0, std::vector<std::uint8_t>(16, 7)});
  auto r = await_job(*live.sys, h.coordinator);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(r->workers_lost == 0);
}

namespace {

// Runs `job` in one process with its workers told they run at `localities` (by rank; the
// same text: the same node), every event kept in `events`.
caf::expected<job_result> run_at(job_spec job, std::shared_ptr<const dataset_split> data,
                                 const std::vector<std::string>& localities, std::vector<std::string>& events,
                                 const std::function<void(const job_handles&, const epoch_summary&)>& on_epoch = {}) {
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  caf::actor_system_config cfg;
  configure_in_process(cfg);
  caf::actor_system sys{cfg};
  job_handles h;
  job_callbacks cb;
  cb.on_event = [&](const std::string& e) { events.push_back(e); };
  cb.on_epoch = [&](const epoch_summary& s) {
    if (on_epoch) on_epoch(h, s);
  };
  h.coordinator = spawn_coordinator(sys, job, *m, data, cb, {}, {}, std::nullopt);
  stage_options opts;
  opts.job_id = job.job_id;
  opts.join_timeout = std::chrono::milliseconds(job.request_timeout_ms);
  opts.data = [data](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> { return data; };
  for (std::uint32_t w = 0; w < job.workers; ++w) {
    opts.wanted_rank = static_cast<std::int32_t>(w);
    opts.locality = localities.at(w);
    h.workers.push_back(spawn_pipeline_stage(sys, h.coordinator, opts));
    join_as_member(h.workers.back(), {}, 0);
  }
  return await_job(sys, h.coordinator);
}

int count_with(const std::vector<std::string>& events, const std::string& text) {
  int n = 0;
  for (const auto& e : events) n += e.find(text) != std::string::npos;
  return n;
}

const std::vector<std::string> two_nodes{"node-a", "node-a", "node-b", "node-b"};
const std::vector<std::string> four_nodes{"node-a", "node-b", "node-c", "node-d"};

}  // namespace

// Two nodes of two workers: each group sums in rank order, the two leaders ring their sums
// and give them to their groups. The same job as a ring of four learns the same parameters
// up to the sums' order, and the grouped job gives the same bits every run.
BOOST_AUTO_TEST_CASE(leaders_ring_their_groups_sums_and_learn_what_the_plain_ring_learns) {
  auto data = synthetic(2000, 200, 3);
  for (reduce_op op : {reduce_op::sum, reduce_op::avg})
    BOOST_TEST_CONTEXT("--allreduce-op " << name_of(op)) {
      job_spec job = job_for(sync_mode::allreduce, 4);
      job.ring_op = op;
      if (op == reduce_op::avg) job.train.lr *= 4;  // the same update as the sum's
      job.local_reduce = true;
      std::vector<std::string> grouped_events, again_events, plain_events;
      auto grouped = run_at(job, data, two_nodes, grouped_events);
      BOOST_REQUIRE_MESSAGE(static_cast<bool>(grouped), (grouped ? "" : describe(grouped.error())));
      BOOST_TEST(count_with(grouped_events, "takes the group's sum round the ring") == 2);
      auto again = run_at(job, data, two_nodes, again_events);
      BOOST_REQUIRE(static_cast<bool>(again));
      BOOST_TEST(same_bits(grouped->params, again->params));
      auto plain = run_at(job, data, four_nodes, plain_events);  // no two share a node: a ring of four
      BOOST_REQUIRE_MESSAGE(static_cast<bool>(plain), (plain ? "" : describe(plain.error())));
      BOOST_TEST(count_with(plain_events, "every worker rings its own gradient") == 1);
      BOOST_TEST(!same_bits(grouped->params, plain->params));  // another order of the sums
      BOOST_TEST(max_abs_diff(grouped->params, plain->params) < 1e-5f);  // measured: about 1e-7
      BOOST_TEST(grouped->samples == plain->samples);
      BOOST_TEST(std::fabs(grouped->test_accuracy - plain->test_accuracy) < 0.01);
      BOOST_TEST(grouped->test_accuracy > 0.6);  // 3 classes
    }
}

// One node holds every worker: the group's sum is the whole sum and no ring forms.
BOOST_AUTO_TEST_CASE(one_group_of_every_worker_needs_no_ring) {
  auto data = synthetic(2000, 200, 3);
  job_spec job = job_for(sync_mode::allreduce, 3);
  job.local_reduce = true;
  std::vector<std::string> events, plain_events;
  auto grouped = run_at(job, data, {"node-a", "node-a", "node-a"}, events);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(grouped), (grouped ? "" : describe(grouped.error())));
  BOOST_TEST(count_with(events, "local group at node-a: workers 0, 1, 2 (worker 0 leads; the group's sum is the "
                                "whole job's, so no ring forms)") == 1);
  job.local_reduce = false;
  auto plain = run_at(job, data, {"node-a", "node-a", "node-a"}, plain_events);
  BOOST_REQUIRE(static_cast<bool>(plain));
  BOOST_TEST(max_abs_diff(grouped->params, plain->params) < 1e-5f);  // measured: about 1e-7
  BOOST_TEST(grouped->test_accuracy > 0.6);
}

// A leader killed mid-run: its group's other member fails its broadcast within
// --request-timeout, the other leader loses its ring neighbour, and the job ends with a
// typed error instead of hanging.
BOOST_AUTO_TEST_CASE(a_killed_leader_ends_the_grouped_ring_in_time) {
  job_spec job = job_for(sync_mode::allreduce, 4);
  job.local_reduce = true;
  job.train.epochs = 40;  // long enough that the kill lands mid-run
  job.request_timeout_ms = 3000;
  std::vector<std::string> events;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_at(job, synthetic(4000, 100, 1), two_nodes, events, [](const job_handles& h, const epoch_summary& s) {
    if (s.epoch == 0) caf::anon_send_exit(h.workers[2], caf::exit_reason::kill);
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_REQUIRE(!r);
  BOOST_TEST((troupe_code(r.error()) == errc::stage_lost || troupe_code(r.error()) == errc::all_workers_lost),
             describe(r.error()));
  BOOST_TEST(took < 30.0);
}
