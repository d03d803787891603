// Tests for core/job_watch.cpp, stepped by hand with explicit time
// (tests/support/job_core_harness.hpp): a bad snapshot, a dead shard (saying at which
// step, and how to go on), a diverged member, a lost replica of an allreduce ring and
// allreduce replicas whose parameters differ end the job with their typed errors; the watchdog ends a stalled job naming who is
// where, and does not count time the process did not run; local group ids are relayed
// only from their leader; the step rates name a straggler.
#define BOOST_TEST_MODULE job_watch
#include <boost/test/unit_test.hpp>

#include <sstream>

#include "tests/support/job_core_harness.hpp"

using namespace troupe;
using namespace troupe::test::job_core_tests;
using test::all_of;
using test::only;

BOOST_AUTO_TEST_CASE(a_bad_snapshot_a_dead_shard_and_a_diverged_member_end_the_job) {
  harness h(tiny_job(sync_mode::async));
  h.start();
  h.epoch(0, 0);
  const auto g = only<gather>(h.epoch(1, 0));
  const auto bad = h.core->on_snapshot(g.id, 1, params_reply{1, 1, tensor({2})});
  BOOST_TEST(fault_of(bad) == "bad_shape: shard 1 sent a snapshot of the wrong size");
  harness d(tiny_job(sync_mode::async));
  d.start();
  d.step(0, 4, 0);
  d.step(1, 3, 0);
  const auto dead = d.core->on_shard_down(1, "remote_link_unreachable");
  // It says where the job was (the slowest member's step) and how to go on.
  BOOST_TEST(fault_of(dead).find("shard_lost: shard 1 died at step 3 (remote_link_unreachable)") == 0u);
  BOOST_TEST(fault_of(dead).find("with --checkpoint-dir it could go on from its newest checkpoint") != std::string::npos);
  job_spec kept = tiny_job(sync_mode::async);
  kept.checkpoints.dir = "/ck";
  kept.checkpoints.on_shard_loss = shard_loss::fail;  // else it restarts in place (test_job_durability)
  harness k(kept);
  k.start();
  BOOST_TEST(fault_of(k.core->on_shard_down(0, "gone")).find("--resume /ck") != std::string::npos);
  BOOST_TEST(d.core->on_shard_down(0, "again").empty());  // the job has ended once
  harness v(tiny_job(sync_mode::async));
  v.start();
  const auto diverged =
      v.core->on_member_down(0, fault{errc::diverged, "the training loss became nan"}, "diverged: ...", v.now);
  BOOST_TEST(fault_of(diverged) == "diverged: the training loss became nan");
  // A lost replica ends an allreduce job at once, naming it: its ring cannot finish a step.
  harness ring(tiny_job(sync_mode::allreduce, 3, 0));
  ring.start();
  const auto lost = ring.core->on_member_down(1, std::nullopt, "remote_link_unreachable", ring.now);
  BOOST_TEST(fault_of(lost).find("stage_lost: worker 1 is gone (remote_link_unreachable); the replicas of --mode "
                                 "allreduce sum their gradients in a ring") == 0u);
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

// Note [Replicas agree]: in --mode allreduce every replica reports the same fingerprint
// of its parameters after an epoch; one that differs ends the job naming both.
BOOST_AUTO_TEST_CASE(allreduce_replicas_that_hold_different_parameters_end_the_job) {
  harness h(tiny_job(sync_mode::allreduce, 3, 0));
  h.start();
  auto report = [&](std::uint32_t rank, std::int32_t epoch, std::uint64_t fnv1a) {
    worker_epoch r{rank, epoch, 0.5, 1, 50, 0.01, tensor()};
    r.params_fnv1a = fnv1a;
    return h.core->on_epoch(r, h.now);
  };
  for (std::uint32_t r = 0; r < 3; ++r) BOOST_TEST(all_of<finish>(report(r, 0, 0xabc)).empty());
  BOOST_TEST(all_of<finish>(report(1, 1, 0xdef)).empty());
  BOOST_TEST(all_of<finish>(report(0, 1, 0)).empty());  // not reported: nothing to compare
  BOOST_TEST(fault_of(report(2, 1, 0x123)) ==
             "diverged: worker 2 and worker 1 hold different parameters after epoch 2 (FNV-1a 0000000000000123 "
             "against 0000000000000def), though --mode allreduce keeps every replica bitwise equal: a fault of a "
             "machine (memory, a device) or a bug in Troupe, not of the hyper-parameters; go on from the last "
             "checkpoint (--resume) and report it if it happens again");
  // Other modes' replicas differ by design: their fingerprints are not compared.
  harness sync(tiny_job(sync_mode::sync, 2));
  sync.start();
  worker_epoch a{0, 0, 0.5, 1, 50, 0.01, tensor()}, b{1, 0, 0.5, 1, 50, 0.01, tensor()};
  a.params_fnv1a = 1;
  b.params_fnv1a = 2;
  BOOST_TEST(all_of<finish>(sync.core->on_epoch(a, sync.now)).empty());
  BOOST_TEST(all_of<finish>(sync.core->on_epoch(b, sync.now)).empty());
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
