// Tests for core/job_durability.cpp, stepped by hand (tests/support/job_core_harness.hpp):
// a checkpoint is committed once every shard's file is written, and counted; a shard that
// could not write its file, or a commit that failed, is warned about and training goes
// on, or ends the job with --checkpoint-fatal; the job's result waits for its last
// checkpoint, for at most the request timeout; --checkpoint-seconds asks the shards for a
// step ahead of the fastest member, and the members that write files at it; a resumed job tells the shards where their state is,
// starts every member at the resumed clock, does not wait for the epochs before it, and
// plans only what is left; with no shard servers, replica 0's stages write the files and
// a resumed job's members are told where their state is; a job that loses a node records
// how far it got, and a resumed one says how many steps it repeats.
#define BOOST_TEST_MODULE job_durability
#include <boost/test/unit_test.hpp>

#include "tests/support/job_core_harness.hpp"

using namespace troupe;
using namespace troupe::test::job_core_tests;
using test::all_of;
using test::only;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The tiny job (2 workers, 2 shards, 2 epochs of 1 step) keeping checkpoints.
job_spec checkpointed(bool fatal = false) {
  job_spec j = tiny_job(sync_mode::sync);
  j.checkpoints.dir = "/checkpoints";
  j.checkpoints.fatal = fatal;
  return j;
}

checkpoint_saved written(std::uint32_t shard, std::int64_t step) {
  return {shard, step, step, "shard-" + std::to_string(shard) + ".tf", {}};
}

// Where a job resumed from checkpoint 7 of the 2 shards goes on.
resume_point checkpoint_seven() {
  resume_point r;
  r.step = 7;
  r.clock = 7;
  r.shards = {"/checkpoints/ckpt-000000000007", {"shard-0.tf", "shard-1.tf"}, 7};
  return r;
}

// Trains the harness's job to its end up to the final gather, which the caller answers.
job_actions_list train_to_the_end(harness& h) {
  const auto eval = only<evaluate>(h.answer(only<gather>(h.train_until_done())));
  return h.core->on_evaluated(eval_reply{eval.epoch, 0.75, 0.5});
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_checkpoint_is_committed_once_every_shards_file_is_written) {
  harness h(checkpointed());
  h.start();
  BOOST_TEST(h.core->on_checkpoint_saved(written(1, 1)).empty());
  const auto c = only<commit_checkpoint>(h.core->on_checkpoint_saved(written(0, 1)));
  BOOST_TEST(c.step == 1);
  BOOST_REQUIRE(c.shards.size() == 2u);
  BOOST_TEST(h.core->on_checkpoint_committed(1, std::nullopt).empty());
  // A report naming a shard the job does not have changes nothing.
  BOOST_TEST(h.core->on_checkpoint_saved(written(7, 2)).empty());
}

BOOST_AUTO_TEST_CASE(a_failed_file_or_commit_is_warned_about_and_training_goes_on) {
  harness h(checkpointed());
  h.start();
  checkpoint_saved bad = written(0, 1);
  bad.error = "No space left on device";
  const auto n = only<note>(h.core->on_checkpoint_saved(bad));
  BOOST_TEST(has(n.text, "checkpoint 1"));
  BOOST_TEST(has(n.text, "shard 0: No space left on device"));
  BOOST_TEST(has(n.text, "training goes on"));
  BOOST_TEST(all_of<commit_checkpoint>(h.core->on_checkpoint_saved(written(1, 1))).empty());  // never complete
  BOOST_TEST(has(only<note>(h.core->on_checkpoint_committed(2, std::string("the manifest: EIO"))).text, "EIO"));
  BOOST_TEST((h.core->phase() == job_phase::training));
}

BOOST_AUTO_TEST_CASE(with_checkpoint_fatal_a_failed_checkpoint_ends_the_job) {
  harness h(checkpointed(true));
  h.start();
  checkpoint_saved bad = written(1, 1);
  bad.error = "Permission denied";
  const std::string why = fault_of(h.core->on_checkpoint_saved(bad));
  BOOST_TEST(has(why, "checkpoint_failed"));
  BOOST_TEST(has(why, "Permission denied"));
  BOOST_TEST(has(why, "--checkpoint-fatal"));
}

BOOST_AUTO_TEST_CASE(the_result_waits_for_the_last_checkpoint) {
  harness h(checkpointed());
  const auto closed = train_to_the_end(h);
  BOOST_TEST(all_of<gather>(closed).empty());  // the final checkpoint (step 2) is not complete yet
  h.core->on_checkpoint_saved(written(0, 1));
  h.core->on_checkpoint_committed(1, std::nullopt);
  h.core->on_checkpoint_saved(written(0, 2));
  only<commit_checkpoint>(h.core->on_checkpoint_saved(written(1, 2)));
  const auto last = only<gather>(h.core->on_checkpoint_committed(2, std::nullopt));
  const auto end = only<finish>(h.answer(last));
  const auto& r = std::get<job_result>(end.outcome);
  BOOST_TEST(r.checkpoints_written == 2);
  BOOST_TEST(r.checkpoints_failed == 0);
  BOOST_TEST(r.resumed_from_step == -1);
}

BOOST_AUTO_TEST_CASE(a_failed_last_checkpoint_does_not_hold_the_result) {
  harness h(checkpointed());
  train_to_the_end(h);
  checkpoint_saved bad = written(0, 2);
  bad.error = "disk full";
  const auto out = h.core->on_checkpoint_saved(bad);
  only<note>(out);
  const auto end = only<finish>(h.answer(only<gather>(out)));
  BOOST_TEST(std::get<job_result>(end.outcome).checkpoints_failed == 1);
}

BOOST_AUTO_TEST_CASE(a_last_checkpoint_that_never_completes_is_given_up_after_the_request_timeout) {
  job_spec j = checkpointed();
  j.request_timeout_ms = 3000;
  harness h(j);
  train_to_the_end(h);
  h.later(milliseconds(2000));
  BOOST_TEST(h.core->on_tick(h.now).empty());  // still within the timeout
  h.later(milliseconds(1500));
  const auto out = h.core->on_tick(h.now);
  BOOST_TEST(only<note>(out).text.find("checkpoint 2") != std::string::npos);
  BOOST_TEST(only<note>(out).text.find("--request-timeout") != std::string::npos);
  const auto end = only<finish>(h.answer(only<gather>(out)));
  BOOST_TEST(std::get<job_result>(end.outcome).checkpoints_failed == 1);
}

BOOST_AUTO_TEST_CASE(checkpoint_seconds_ask_for_a_step_ahead_of_the_fastest_member) {
  job_spec j = checkpointed();
  j.train.batch_size = 5;  // 10 steps per epoch, 20 in all
  j.checkpoints.seconds = 2.0;
  harness h(j);
  h.start();
  h.step(0, 3, 0);
  h.step(1, 5, 0);
  h.later(milliseconds(1000));
  BOOST_TEST(all_of<request_checkpoint>(h.core->on_tick(h.now)).empty());  // not 2 s yet
  h.later(milliseconds(1100));
  BOOST_TEST(only<request_checkpoint>(h.core->on_tick(h.now)).step == 5 + 4);
  h.later(milliseconds(1000));
  BOOST_TEST(all_of<request_checkpoint>(h.core->on_tick(h.now)).empty());
  h.step(0, 17, 1);
  h.step(1, 16, 1);
  h.later(milliseconds(1100));
  BOOST_TEST(all_of<request_checkpoint>(h.core->on_tick(h.now)).empty());  // 21: past the job's last step
}

// The members that write files at a step: the stages of replica 0 without shard servers
// (Note [Members' checkpoints]), every live member when the job keeps residuals (Note
// [Residuals in checkpoints]), none otherwise.
BOOST_AUTO_TEST_CASE(checkpoint_seconds_ask_the_members_that_write_at_the_step) {
  job_spec plain = checkpointed();
  plain.train.batch_size = 5;  // 10 steps per epoch
  plain.checkpoints.seconds = 1.0;
  job_spec two_bit = plain;
  two_bit.compression = *parse_grad_codec("2bit");
  job_spec ring = tiny_job(sync_mode::allreduce, 2, 0);
  ring.train.batch_size = 5;
  ring.checkpoints = plain.checkpoints;
  struct want {
    job_spec job;
    std::vector<std::uint32_t> members;
  };
  for (const want& w : {want{plain, {}}, want{two_bit, {0, 1}}, want{ring, {0}}}) {
    BOOST_TEST_CONTEXT(name_of(w.job.mode) << ", compression " << to_string(w.job.compression)) {
      harness h(w.job);
      h.start();
      h.step(0, 1, 0);
      h.step(1, 1, 0);
      h.later(milliseconds(1100));
      const auto r = only<request_checkpoint>(h.core->on_tick(h.now));
      BOOST_TEST(r.step == 1 + 4);
      BOOST_TEST(r.members == w.members, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_resumed_job_starts_from_its_checkpoint) {
  job_spec j = checkpointed();
  j.train.batch_size = 10;  // 5 steps per epoch
  harness h(j);
  h.core->resume_from(checkpoint_seven());
  const auto w = only<welcome_shard>(h.shard());
  BOOST_TEST(w.welcome.resume.dir == "/checkpoints/ckpt-000000000007");
  BOOST_TEST(w.welcome.resume.clock == 7);
  BOOST_TEST(w.welcome.resume.files.size() == 2u);
  h.shard();
  h.member();
  const auto start = only<start_shards>(h.member());
  BOOST_TEST(start.members.clock == 7);
  const auto started = h.core->shards_started(h.now);
  for (const auto& m : all_of<welcome_member>(started)) {
    BOOST_TEST(m.assignment.resume_clock == 7);
    BOOST_TEST(m.assignment.resume.dir.empty());  // the shards hold the whole state
  }
  BOOST_TEST(only<note>(started).text.find("training goes on from step 7") != std::string::npos);
  // Epoch 0 (steps 0-4) was closed by the run that wrote the checkpoint: epoch 1 closes
  // on its own reports.
  h.step(0, 10, 1);
  h.step(1, 10, 1);
  h.epoch(0, 1);
  BOOST_TEST(all_of<gather>(h.epoch(1, 1)).empty());  // the last epoch: after training
  h.done(0, 10);
  const auto g = only<gather>(h.done(1, 10));
  BOOST_TEST(g.with_params);
  const auto eval = only<evaluate>(h.answer(g));
  BOOST_TEST(eval.epoch == 1);
  const auto after = h.core->on_evaluated(eval_reply{1, 0.75, 0.5});
  BOOST_TEST(all_of<gather>(after).empty());  // waits for checkpoint 10
  h.core->on_checkpoint_saved(written(0, 10));
  h.core->on_checkpoint_saved(written(1, 10));
  const auto end = only<finish>(h.answer(only<gather>(h.core->on_checkpoint_committed(10, std::nullopt))));
  const auto& res = std::get<job_result>(end.outcome);
  BOOST_TEST(res.resumed_from_step == 7);
  BOOST_TEST(res.samples_planned == 2 * (100 - 70));  // 100 per worker; 70 of them trained before
}

// Note [Residuals in checkpoints]: with 2-bit pushes in sync, the members that start at
// the resumed clock are told where their residuals are; a replacement joining later is not.
BOOST_AUTO_TEST_CASE(a_resumed_job_that_keeps_residuals_tells_its_members_where_they_are) {
  job_spec j = checkpointed();
  j.train.batch_size = 5;  // 10 steps per epoch
  j.compression = *parse_grad_codec("2bit");
  harness h(j);
  h.core->resume_from(checkpoint_seven());
  h.shard();
  h.shard();
  h.member();
  only<start_shards>(h.member());
  const auto welcomes = all_of<welcome_member>(h.core->shards_started(h.now));
  BOOST_REQUIRE(welcomes.size() == 2u);
  for (const auto& m : welcomes) {
    BOOST_TEST(m.assignment.resume_clock == 7);
    BOOST_TEST(m.assignment.resume.dir == "/checkpoints/ckpt-000000000007");
    BOOST_TEST(m.assignment.resume.clock == 7);
  }
  // A replacement joins at a later round, with residuals of its own (zeros).
  h.step(0, 8, 0);
  h.step(1, 8, 0);
  h.core->on_member_down(1, std::nullopt, "killed", h.now);
  const auto add = only<add_to_shards>(h.member());
  const auto late = only<welcome_member>(h.core->member_added(add.rank, h.now));
  BOOST_TEST(late.assignment.resume_clock > 8);  // past the rounds whose rows were dealt to the others
  BOOST_TEST(late.assignment.resume.dir.empty());
}

// Note [Members' checkpoints]: with no shard servers, the stages of replica 0 write the
// files (one here), a checkpoint is committed once each has, and a resumed job's members
// are told where their state is.
BOOST_AUTO_TEST_CASE(without_shard_servers_replica_zeros_stages_write_the_files) {
  job_spec j = tiny_job(sync_mode::allreduce, 2, 0);
  j.checkpoints.dir = "/checkpoints";
  j.train.batch_size = 10;  // 5 steps per epoch
  {
    harness h(j);
    h.start();
    const checkpoint_saved stage0{0, 5, 5, "stage-0.tf", {}};
    const auto c = only<commit_checkpoint>(h.core->on_checkpoint_saved(stage0));
    BOOST_TEST(c.step == 5);
    BOOST_REQUIRE(c.shards.size() == 1u);
    BOOST_TEST(c.shards[0].file == "stage-0.tf");
    BOOST_TEST(h.core->on_checkpoint_saved(checkpoint_saved{1, 6, 6, "stage-1.tf", {}}).empty());  // no stage 1
    checkpoint_saved bad{0, 7, 7, "stage-0.tf", "No space left on device"};
    BOOST_TEST(has(only<note>(h.core->on_checkpoint_saved(bad)).text, "stage 0: No space left on device"));
  }
  harness h(j);
  resume_point r;
  r.step = r.clock = 7;
  r.shards = {"/checkpoints/ckpt-000000000007", {"stage-0.tf"}, 7};
  h.core->resume_from(r);
  h.member();
  const auto welcomes = all_of<welcome_member>(h.member());  // no shards to start first
  BOOST_REQUIRE(welcomes.size() == 2u);
  for (const auto& w : welcomes) {
    BOOST_TEST(w.assignment.resume_clock == 7);
    BOOST_TEST(w.assignment.resume.dir == "/checkpoints/ckpt-000000000007");
    BOOST_TEST(w.assignment.resume.files == std::vector<std::string>{"stage-0.tf"});
  }
}

// Note [Steps replayed]: a job that keeps checkpoints and loses a node records, just
// before it ends, the furthest step a member reached;
// one that fails otherwise, or keeps no checkpoints, records nothing.
BOOST_AUTO_TEST_CASE(a_job_that_loses_a_node_records_how_far_it_got) {
  harness h(checkpointed());
  h.start();
  h.step(0, 1, 0);
  h.step(1, 2, 1);
  const auto out = h.core->on_shard_down(1, "remote_link_unreachable");
  BOOST_REQUIRE(out.size() == 2u);
  BOOST_REQUIRE(std::holds_alternative<record_loss>(out[0]));  // written before the job ends
  const loss_record& r = std::get<record_loss>(out[0]).record;
  BOOST_TEST(r.job_id == h.job.job_id);
  BOOST_TEST(r.reached == 2);
  BOOST_TEST(r.why.find("shard_lost: shard 1 died") == 0u);
  // Note [Restarting in place]: with checkpoints the job restarts instead of ending.
  BOOST_REQUIRE(std::holds_alternative<restart>(out[1]));
  BOOST_TEST((std::get<restart>(out[1]).why.code == errc::shard_lost));
  BOOST_TEST((h.core->phase() == job_phase::finished));  // the shell makes the next core
  BOOST_TEST(h.core->on_shard_down(0, "again").empty());

  harness resumed(checkpointed());  // a resumed job has reached its checkpoint's step
  resumed.core->resume_from(checkpoint_seven());
  resumed.start();
  BOOST_TEST(only<record_loss>(resumed.core->on_shard_down(0, "gone")).record.reached == 7);

  harness diverged(checkpointed());  // not a lost node: going on would diverge again
  diverged.start();
  const auto d = diverged.core->on_member_down(0, fault{errc::diverged, "nan"}, "diverged", diverged.now);
  BOOST_TEST(all_of<record_loss>(d).empty());
  BOOST_TEST(fault_of(d) == "diverged: nan");

  harness kept_none(tiny_job(sync_mode::sync));  // without --checkpoint-dir, nowhere to write
  kept_none.start();
  BOOST_TEST(all_of<record_loss>(kept_none.core->on_shard_down(0, "gone")).empty());
}

BOOST_AUTO_TEST_CASE(a_resumed_job_says_how_many_steps_it_repeats_when_it_knows) {
  for (const std::optional<std::int64_t> known : {std::optional<std::int64_t>(3), std::optional<std::int64_t>()}) {
    job_spec j = checkpointed();
    j.train.batch_size = 10;  // 5 steps per epoch
    observability obs;
    obs.metrics = std::make_shared<monitoring::registry>("job-replayed");
    harness h(j, obs);
    resume_point r = checkpoint_seven();
    r.steps_replayed = known;
    h.core->resume_from(r);
    h.core->restarted_in_place(2);  // Note [Restarting in place]: its shell made it the third core
    // The gauge exists only when the count is known.
    const std::string scrape = obs.metrics->scrape();
    BOOST_TEST(has(scrape, "troupe_steps_replayed{") == known.has_value(), scrape);
    if (known) BOOST_TEST(has(scrape, "role=\"coordinator\"} 3"), scrape);
    // Each core made after a lost shard server counts one restart; this one is the first
    // made in this registry.
    const auto at = scrape.find("\ntroupe_restarts_in_place_total{");
    BOOST_REQUIRE(at != std::string::npos);
    BOOST_TEST(scrape.substr(at + 1, scrape.find('\n', at + 1) - at - 1).ends_with("} 1"), scrape);
    h.start();
    h.step(0, 10, 1);
    h.step(1, 10, 1);
    h.epoch(0, 1);
    h.epoch(1, 1);
    h.done(0, 10);
    const auto eval = only<evaluate>(h.answer(only<gather>(h.done(1, 10))));
    h.core->on_evaluated(eval_reply{eval.epoch, 0.75, 0.5});
    h.core->on_checkpoint_saved(written(0, 10));
    h.core->on_checkpoint_saved(written(1, 10));
    const auto end = only<finish>(h.answer(only<gather>(h.core->on_checkpoint_committed(10, std::nullopt))));
    const auto& res = std::get<job_result>(end.outcome);
    BOOST_TEST(res.resumed_from_step == 7);
    BOOST_TEST(res.steps_replayed == known.value_or(-1));
    BOOST_TEST(res.restarts_in_place == 2);
  }
}

// Note [Restarting in place]: --on-shard-loss fail keeps the job's end; a restarted core
// whose lost server is not replaced within --stall-timeout says what to start.
BOOST_AUTO_TEST_CASE(a_lost_shard_ends_the_job_when_asked_and_a_missing_replacement_is_named) {
  job_spec failing = checkpointed();
  failing.checkpoints.on_shard_loss = shard_loss::fail;
  harness f(failing);
  f.start();
  const auto out = f.core->on_shard_down(1, "gone");
  BOOST_TEST(all_of<restart>(out).empty());
  BOOST_TEST(fault_of(out).find("--on-shard-loss fail") != std::string::npos, fault_of(out));
  BOOST_TEST(fault_of(out).find("--resume " + failing.checkpoints.dir) != std::string::npos, fault_of(out));

  harness r(checkpointed());
  r.core->restarted_in_place(1);
  r.shard();  // one of the two servers is back
  r.later(std::chrono::milliseconds(r.job.stall_timeout_ms + 2000));
  const auto stalled = r.core->on_tick(r.now);
  BOOST_TEST(fault_of(stalled).find("stalled: no progress") == 0u, fault_of(stalled));
  BOOST_TEST(fault_of(stalled).find("1 of 2 shards") != std::string::npos, fault_of(stalled));
  BOOST_TEST(fault_of(stalled).find("troupe node --role server --join") != std::string::npos, fault_of(stalled));

  harness fresh(checkpointed());  // a first start that stalls is not told of a replacement
  fresh.shard();
  fresh.later(std::chrono::milliseconds(fresh.job.stall_timeout_ms + 2000));
  BOOST_TEST(fault_of(fresh.core->on_tick(fresh.now)).find("in its place") == std::string::npos);
}
