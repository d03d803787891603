// Tests for core/job.cpp: the defaults, when a lost shard restarts the job, the derived
// per-worker sizes and schedule, the samples a worker trained before a clock, and mode
// names (validation in test_job_validation.cpp).
#define BOOST_TEST_MODULE job
#include <boost/test/unit_test.hpp>

#include "core/job.hpp"
#include "tests/support/tiny_job.hpp"
#include "train/text_dataset.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(defaults_are_valid_and_the_embedded_job) {
  job_spec j;
  BOOST_TEST(!validate(j).has_value());
  BOOST_TEST(j.train.epochs == 3);
  BOOST_TEST((j.mode == sync_mode::async));
  BOOST_TEST(j.workers == 2u);
  BOOST_TEST(j.servers == 2u);
}

// Note [Restarting in place]: the policy's names, and when a lost shard restarts the job.
BOOST_AUTO_TEST_CASE(a_lost_shard_restarts_the_job_when_it_keeps_checkpoints) {
  BOOST_TEST((*parse_shard_loss("recover") == shard_loss::recover));
  BOOST_TEST((*parse_shard_loss("auto") == shard_loss::automatic));
  BOOST_TEST(parse_shard_loss("retry").error().message.find("auto, fail or recover") != std::string::npos);
  for (auto p : {shard_loss::automatic, shard_loss::fail, shard_loss::recover})
    BOOST_TEST((*parse_shard_loss(name_of(p)) == p));
  job_spec j;
  j.servers = 2;
  BOOST_TEST(!restarts_on_shard_loss(j));  // nothing to restart from
  j.checkpoints.dir = "ck";
  BOOST_TEST(restarts_on_shard_loss(j));
  j.checkpoints.on_shard_loss = shard_loss::fail;
  BOOST_TEST(!restarts_on_shard_loss(j));
  j.checkpoints.on_shard_loss = shard_loss::recover;
  j.servers = 0;
  BOOST_TEST(!restarts_on_shard_loss(j));  // no shard servers to lose
  // Note [Parked members]: a member waits for the restart when a shard is what it lost.
  j.servers = 2;
  BOOST_TEST(waits_for_restart(j, {errc::shard_lost, "the bulk lane to shard 1 closed"}));
  BOOST_TEST(waits_for_restart(j, {errc::stalled, "pull from shard 1 failed"}));
  BOOST_TEST(!waits_for_restart(j, {errc::diverged, "nan"}));
  BOOST_TEST(!waits_for_restart(j, {errc::compute_failed, "out of memory"}));
  j.checkpoints.on_shard_loss = shard_loss::fail;
  BOOST_TEST(!waits_for_restart(j, {errc::shard_lost, "gone"}));
}

BOOST_AUTO_TEST_CASE(per_worker_sizes_and_schedule) {
  job_spec j;
  j.train_size = 1000;
  j.workers = 3;
  j.train.batch_size = 100;
  BOOST_TEST(samples_per_worker(j) == 333);
  BOOST_TEST(steps_per_epoch(j) == 4);
  const lr_schedule s = job_schedule(j);
  BOOST_TEST(s.total_steps == 4 * 3);
  BOOST_TEST(s.warmup_steps == 2);
}

BOOST_AUTO_TEST_CASE(the_sync_schedule_stops_growing_at_the_critical_batch) {
  job_spec j;
  j.train_size = 60000;
  j.workers = 16;
  j.train.batch_size = 128;  // 2048 samples a round: an eighth of the linear lr at the default 256
  j.train.epochs = 5;        // 150 rounds, so the stretched warm-up (120) fits
  j.mode = sync_mode::sync;
  const lr_schedule capped = job_schedule(j);
  BOOST_TEST(capped.base == j.train.lr / 8);
  BOOST_TEST(capped.warmup_steps == 8 * make_schedule(j.train, samples_per_worker(j)).warmup_steps);
  j.critical_batch = 0;
  BOOST_TEST(job_schedule(j).base == j.train.lr);
  j.critical_batch = 256;
  j.mode = sync_mode::async;  // async applies each worker's gradient: no cap
  BOOST_TEST(job_schedule(j).base == j.train.lr);
  // ... but 16 of them warm up twice as long (Note [Warm-up of asynchrony]), unless the
  // job asks for no async rule.
  const std::int64_t plain_warmup = make_schedule(j.train, samples_per_worker(j)).warmup_steps;
  BOOST_TEST(job_schedule(j).warmup_steps == 2 * plain_warmup);
  j.async_correction = async_rule::none;
  BOOST_TEST(job_schedule(j).warmup_steps == plain_warmup);
  j.async_correction = async_rule::momentum;
  j.critical_batch = -1;
  BOOST_TEST(validate(j).value_or("").find("--critical-batch") != std::string::npos);
  j.critical_batch = 256;
  j.dc_lambda = -1.f;
  BOOST_TEST(validate(j).value_or("").find("--dc-lambda") != std::string::npos);
}

// Note [The job's batch]: --batch-size auto.
BOOST_AUTO_TEST_CASE(the_auto_batch_keeps_the_jobs_batch_as_workers_are_added) {
  job_spec j;
  auto chosen = [&](sync_mode mode, std::uint32_t workers) {
    j.mode = mode;
    j.workers = workers;
    const batch_choice b = auto_batch(j);
    return std::pair<std::int64_t, float>{b.batch, b.lr_factor};
  };
  using choice = std::pair<std::int64_t, float>;
  // sync: the critical batch (256) a round, the lr scaled by the batch over 128
  BOOST_TEST((chosen(sync_mode::sync, 1) == choice{128, 1.f}));
  BOOST_TEST((chosen(sync_mode::sync, 2) == choice{128, 1.f}));
  BOOST_TEST((chosen(sync_mode::sync, 3) == choice{86, 86.f / 128}));  // rounded up
  BOOST_TEST((chosen(sync_mode::sync, 16) == choice{16, 0.125f}));
  BOOST_TEST((chosen(sync_mode::sync, 64) == choice{8, 0.0625f}));  // never below 8
  // async and ssp: 128 across up to 8 workers, at the lr as given
  BOOST_TEST((chosen(sync_mode::async, 1) == choice{128, 1.f}));
  BOOST_TEST((chosen(sync_mode::async, 4) == choice{32, 1.f}));
  BOOST_TEST((chosen(sync_mode::ssp, 3) == choice{43, 1.f}));
  BOOST_TEST((chosen(sync_mode::async, 8) == choice{16, 1.f}));
  // past 8 workers the job's batch shrinks as 8 / N, at the same lr per sample
  BOOST_TEST((chosen(sync_mode::async, 9) == choice{13, 117.f / 128}));  // 113 across, rounded up
  BOOST_TEST((chosen(sync_mode::ssp, 16) == choice{4, 0.5f}));
  BOOST_TEST((chosen(sync_mode::async, 32) == choice{4, 1.f}));  // never below 4
  BOOST_TEST((chosen(sync_mode::async, 64) == choice{4, 1.f}));  // nor above the lr as given
  // linear scaling without a cap, pipelines and key-value jobs: 128 a worker
  j.critical_batch = 0;
  BOOST_TEST((chosen(sync_mode::sync, 16) == choice{128, 1.f}));
  j.critical_batch = 512;
  BOOST_TEST((chosen(sync_mode::sync, 16) == choice{32, 0.25f}));
  j.pipeline_stages = 2;
  BOOST_TEST((chosen(sync_mode::async, 4) == choice{128, 1.f}));
  j.pipeline_stages = 1;
  j.kv = true;
  BOOST_TEST((chosen(sync_mode::async, 4) == choice{128, 1.f}));
}

BOOST_AUTO_TEST_CASE(backup_workers_scale_the_lr_for_the_gradients_a_round_sums) {
  job_spec j;
  j.train_size = 60000;
  j.workers = 5;
  j.train.batch_size = 64;  // 5 x 64 = 320 samples: past 256
  j.mode = sync_mode::sync;
  BOOST_TEST(job_schedule(j).base == static_cast<float>(j.train.lr * (256.0 / 320.0)));
  j.backup_workers = 1;  // rounds sum 4 x 64 = 256: linear scaling, no cap
  BOOST_TEST(!validate(j));
  BOOST_TEST(job_schedule(j).base == j.train.lr);
  j.backup_workers = 5;
  BOOST_TEST(validate(j).value_or("").find("fewer than --workers (5)") != std::string::npos);
  j.backup_workers = 1;
  for (auto other : {sync_mode::async, sync_mode::ssp}) {
    j.mode = other;
    BOOST_TEST(validate(j).value_or("").find("--backup-workers") != std::string::npos);
  }
  j.mode = sync_mode::sync;
  j.local_reduce = true;
  BOOST_TEST(validate(j).value_or("").find("--local-reduce") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(members_and_microbatches) {
  job_spec j;
  j.workers = 3;
  j.pipeline_stages = 4;
  BOOST_TEST(members(j) == 12u);
  j.microbatches = 4;
  std::int64_t total = 0;
  for (int i = 0; i < 4; ++i) {
    BOOST_TEST(microbatch_begin(10, 4, i) == total);
    total += microbatch_rows(10, 4, i);
    BOOST_TEST((microbatch_rows(10, 4, i) == 2 || microbatch_rows(10, 4, i) == 3));
  }
  BOOST_TEST(total == 10);
  BOOST_TEST(microbatches_for(j, 3) == 3);  // a short last batch runs as fewer parts
  BOOST_TEST(microbatches_for(j, 128) == 4);
  j.train_size = 1000;
  j.train.batch_size = 100;
  j.workers = 3;
  BOOST_TEST(batch_rows(j, 0) == 100);
  BOOST_TEST(batch_rows(j, 3) == 33);  // 333 per worker
}

BOOST_AUTO_TEST_CASE(mode_names) {
  BOOST_TEST((*parse_sync_mode("ssp") == sync_mode::ssp));
  BOOST_TEST(parse_sync_mode("bsp").error().message.find("sync, async, ssp or allreduce") != std::string::npos);
  BOOST_TEST(name_of(sync_mode::sync) == "sync");
  BOOST_TEST((*parse_sync_mode("allreduce") == sync_mode::allreduce));
  BOOST_TEST(name_of(sync_mode::allreduce) == "allreduce");
}

// Note [Ring all-reduce of gradients]: no shard servers, any number of replicas.
BOOST_AUTO_TEST_CASE(allreduce_has_no_shard_servers_and_sums_like_a_sync_round) {
  job_spec j;
  j.mode = sync_mode::allreduce;
  j.workers = 8;
  j.servers = 0;
  BOOST_TEST(!validate(j));
  j.servers = 2;
  BOOST_TEST(validate(j).value_or("").find("--mode allreduce sums the gradients among the replicas") == 0);
  j.servers = 0;
  j.local_reduce = true;  // Note [Rings of leaders]: one pipeline stage, real compute
  BOOST_TEST(!validate(j));
  j.pipeline_stages = 2;
  BOOST_TEST(validate(j).value_or("").find("--local-reduce with --mode allreduce") == 0);
  j.pipeline_stages = 1;
  j.simulate_compute_ms = 1.0;
  BOOST_TEST(validate(j).value_or("").find("no --simulate-compute") != std::string::npos);
  j.simulate_compute_ms = 0.0;
  j.local_reduce = false;
  j.ring_op = reduce_op::max;
  BOOST_TEST(validate(j).value_or("").find("--allreduce-op must be sum or avg") == 0);
  j.ring_op = reduce_op::sum;
  j.ring_piece_elems = 0;
  BOOST_TEST(validate(j).value_or("").find("at least one element") != std::string::npos);
  j.ring_piece_elems = 1024;
  j.checkpoints.dir = "/ck";  // the replicas write them (Note [Members' checkpoints])
  BOOST_TEST(!validate(j));
  j.checkpoints.dir.clear();
  j.mode = sync_mode::sync;
  BOOST_TEST(validate(j).value_or("").find("or use --mode allreduce") != std::string::npos);  // servers 0, 8 replicas
  // The sum: sync's batch and lr; the average: each replica trains the reference batch at the lr given.
  j.train_size = 60000;
  j.train.batch_size = 128;
  j.mode = sync_mode::allreduce;
  const batch_choice sum = auto_batch(j);
  j.mode = sync_mode::sync;
  const batch_choice sync = auto_batch(j);
  BOOST_TEST(sum.batch == sync.batch);
  BOOST_TEST(sum.lr_factor == sync.lr_factor);
  j.workers = 16;
  const float capped = job_schedule(j).base;
  j.mode = sync_mode::allreduce;
  BOOST_TEST(job_schedule(j).base == capped);
  BOOST_TEST(capped < j.train.lr);
  j.ring_op = reduce_op::avg;
  BOOST_TEST(job_schedule(j).base == j.train.lr);
  BOOST_TEST(auto_batch(j).batch == reference_batch);
  BOOST_TEST(auto_batch(j).lr_factor == 1.f);
}

BOOST_AUTO_TEST_CASE(samples_before_a_clock_count_the_short_last_batch) {
  job_spec j = test::tiny_job(sync_mode::sync);  // 2 workers of 50 samples
  j.train.batch_size = 16;  // 50 samples per worker: batches of 16, 16, 16, 2
  BOOST_TEST(steps_per_epoch(j) == 4);
  BOOST_TEST(samples_before(j, 0) == 0);
  BOOST_TEST(samples_before(j, 3) == 48);
  BOOST_TEST(samples_before(j, 4) == 50);
  BOOST_TEST(samples_before(j, 6) == 82);
}

// Note [Cuts by measured time]: a pipeline without --cuts is cut by the layers' measured
// time by default, and the note names the cuts, the measure and each stage's share; a
// job with simulated compute is cut by FLOPs; given cuts are kept and no note is made.
BOOST_AUTO_TEST_CASE(prepare_job_cuts_a_pipeline_by_measured_time_and_says_how) {
  const dataset_split data = make_synthetic(256, 64, 3);
  job_spec j = test::tiny_job(sync_mode::sync, 1, 1);
  j.train.model = "cnn";
  j.pipeline_stages = 2;
  j.microbatches = 4;
  BOOST_TEST((j.balance == stage_balance::time));
  std::string note;
  auto m = prepare_job(j, data, &note);
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  BOOST_REQUIRE(j.cuts.size() == 1u);
  BOOST_TEST(m->cut(std::vector<int>(j.cuts.begin(), j.cuts.end())).has_value());
  BOOST_TEST(note.find("pipeline: cut at layer " + std::to_string(j.cuts[0])) == 0u, note);
  BOOST_TEST(note.find("measured time") != std::string::npos, note);
  BOOST_TEST(note.find("on 32 rows") != std::string::npos, note);  // 128 / 4 microbatches
  BOOST_TEST(note.find("stage 1 ") != std::string::npos, note);
  BOOST_TEST(note.find("--cuts " + std::to_string(j.cuts[0]) + " repeats them") != std::string::npos, note);

  job_spec simulated = test::tiny_job(sync_mode::sync, 1, 1);
  simulated.train.model = "cnn";
  simulated.pipeline_stages = 2;
  simulated.simulate_compute_ms = 1.0;
  std::string flops_note;
  BOOST_REQUIRE(prepare_job(simulated, data, &flops_note).has_value());
  BOOST_TEST(flops_note.find("balanced by forward FLOPs") != std::string::npos, flops_note);
  BOOST_TEST((simulated.cuts == std::vector<std::int32_t>{4}));  // conv2 (7.2 MFLOP) ends stage 0

  job_spec given = simulated;
  given.cuts = {3};
  std::string none;
  BOOST_REQUIRE(prepare_job(given, data, &none).has_value());
  BOOST_TEST(none.empty());
  BOOST_TEST((given.cuts == std::vector<std::int32_t>{3}));
}

// --augment crops and flips images: planning a job that would augment a text, or with an
// augmentation the parser does not know, is refused with what to do.
BOOST_AUTO_TEST_CASE(prepare_job_refuses_augmenting_a_text) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += static_cast<char>('a' + i % 3);
  auto data = make_text_split(*decode_text(text, "t"), 8, "t");
  BOOST_REQUIRE(data.has_value());
  job_spec j = test::tiny_job(sync_mode::sync, 1, 1);
  j.train.model = "layers:embedding 4; linear classes";
  j.train_samples = 0;
  j.train.augment = "flip";
  auto m = prepare_job(j, *data, nullptr);
  BOOST_REQUIRE(!m.has_value());
  BOOST_TEST(m.error().message.find("use --augment none") != std::string::npos, m.error().message);
  j.train.augment = "spin";
  auto bad = prepare_job(j, *data, nullptr);
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().message.find("unknown item 'spin'") != std::string::npos, bad.error().message);
}
