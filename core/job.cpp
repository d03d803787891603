// Mode names, job validation and preparation, and the derived schedule.
#include "core/job.hpp"

#include <cmath>
#include <iomanip>
#include <random>
#include <sstream>

#include "base/enum_names.hpp"
#include "train/augment.hpp"
#include "train/evaluate.hpp"
#include "train/layer_profile.hpp"

namespace troupe {

namespace {

std::string fresh_job_id() {
  std::random_device rd;
  const std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

// Note [Cuts by measured time]
// FLOPs leave a pipeline's stages unequal in time: the CNN's convolutions and pooling
// spend much of their time moving memory (im2col, the pooled maps), which FLOPs do not
// count. So by default (--balance time) the process that plans the job runs every layer's
// forward and backward on one microbatch of random rows (median of 5 passes, after one
// untimed) and cuts where the slowest stage is fastest. The profile runs on the
// planner's host CPU, so it stands for members that compute there too; for members on
// GPUs (or another kind of host) give --cuts or --balance flops. The cuts go to every
// member in the job spec, so all members agree; they can differ from run to run, which
// does not change a job's results where the stages' layers compute the same math
// wherever they are cut (sync and async with shard servers). A job with
// --simulate-compute is balanced by FLOPs: its stages do not run the layers.
expected<model> prepare_job(job_spec& job, const dataset_split& data, std::string* cut_note) {
  job.train_size = data.train.size();
  const shape s = data.train.sample_shape();
  job.input_shape.assign(s.begin(), s.end());
  job.num_classes = data.train.num_classes;
  if (job.job_id.empty()) job.job_id = fresh_job_id();
  if (auto problem = validate(job)) return failure{*problem};
  auto m = build_model(job);
  if (!m) return m.error();
  if (auto bad = labels_mismatch(*m, data.train)) return *bad;
  auto aug = parse_augmentation(job.train.augment);
  if (!aug) return aug.error();
  if (auto bad = augmentation_unfit(*aug, data.train)) return *bad;
  const std::string stages_flag = "--pipeline-stages " + std::to_string(job.pipeline_stages) + ": ";
  if (job.pipeline_stages > 1 && job.cuts.empty()) {
    const stage_balance by = job.simulate_compute_ms > 0 ? stage_balance::flops : job.balance;
    const std::int64_t b = job.train.batch_size;
    const std::int64_t rows = microbatch_rows(b, microbatches_for(job, b), 0);
    auto cost = layer_costs(*m, by, rows);
    if (!cost) return failure{stages_flag + cost.error().message};
    auto cuts = cuts_by_cost(*cost, static_cast<int>(job.pipeline_stages), m->name());
    if (!cuts) return failure{stages_flag + cuts.error().message};
    job.cuts.assign(cuts->begin(), cuts->end());
    if (cut_note) *cut_note = describe_cuts(*cuts, by, stage_costs(*cost, *cuts), rows);
  } else if (!job.cuts.empty()) {
    auto stages = m->cut(std::vector<int>(job.cuts.begin(), job.cuts.end()));
    if (!stages) return failure{"--cuts: " + stages.error().message};
  }
  return m;
}

std::string describe_cuts(const std::vector<int>& cuts, stage_balance by, const std::vector<double>& stage_cost,
                          std::int64_t rows) {
  std::ostringstream s;
  s << "pipeline: cut at layer" << (cuts.size() > 1 ? "s" : "");
  for (std::size_t i = 0; i < cuts.size(); ++i) s << (i ? "," : " ") << cuts[i];
  switch (by) {
    case stage_balance::time:
      s << ", balanced by measured time (each layer's forward and backward on " << rows
        << " rows on this host, median of " << profile_options{}.passes << ")";
      break;
    case stage_balance::flops: s << ", balanced by forward FLOPs"; break;
    case stage_balance::params: s << ", balanced by parameters"; break;
  }
  double total = 0.0;
  for (double c : stage_cost) total += c;
  s << ";";
  for (std::size_t i = 0; i < stage_cost.size(); ++i) {
    s << (i ? "," : "") << " stage " << i << " " << std::fixed << std::setprecision(0)
      << (total > 0 ? 100.0 * stage_cost[i] / total : 0.0) << "%";
    if (by == stage_balance::time) s << " (" << std::setprecision(2) << stage_cost[i] * 1e3 << " ms)";
  }
  s << "; --cuts";
  for (std::size_t i = 0; i < cuts.size(); ++i) s << (i ? "," : " ") << cuts[i];
  s << " repeats them";
  return s.str();
}

// sync_mode's names, for its parse and name_of.
constexpr std::array<enum_name<sync_mode>, 4> sync_modes{{
    {sync_mode::sync, "sync"},
    {sync_mode::async, "async"},
    {sync_mode::ssp, "ssp"},
    {sync_mode::allreduce, "allreduce"},
}};

expected<sync_mode> parse_sync_mode(std::string_view name) { return parse_in(sync_modes, name, "mode"); }

std::string_view name_of(sync_mode x) { return name_in(sync_modes, x); }

// shard_loss's names, for its parse and name_of.
constexpr std::array<enum_name<shard_loss>, 3> shard_losses{{
    {shard_loss::automatic, "auto"},
    {shard_loss::fail, "fail"},
    {shard_loss::recover, "recover"},
}};

expected<shard_loss> parse_shard_loss(std::string_view name) {
  return parse_in(shard_losses, name, "--on-shard-loss policy");
}

std::string_view name_of(shard_loss x) { return name_in(shard_losses, x); }

bool restarts_on_shard_loss(const job_spec& job) {
  if (job.checkpoints.dir.empty() || job.servers == 0) return false;
  return job.checkpoints.on_shard_loss != shard_loss::fail;
}

bool replaces_kv_shards(const job_spec& job) { return job.kv && restarts_on_shard_loss(job); }

bool rings_kv_members(const job_spec& job) { return job.kv && job.mode == sync_mode::allreduce; }

bool waits_for_restart(const job_spec& job, const fault& f) {
  return restarts_on_shard_loss(job) &&
         (f.code == errc::shard_lost || f.code == errc::stalled || f.code == errc::timed_out);
}

namespace {

// validate(), the members, shard servers, stages and local groups.
std::optional<std::string> validate_layout(const job_spec& job) {
  if (job.workers < 1 || job.workers > 4096) return "--workers must be between 1 and 4096";
  if (job.servers > 1024) return "--servers must be between 0 and 1024";
  if (job.pipeline_stages < 1 || job.pipeline_stages > 64) return "--pipeline-stages must be between 1 and 64";
  if (job.mode == sync_mode::allreduce && job.servers != 0)
    return "--mode allreduce sums the gradients among the replicas themselves, with no shard servers: drop "
           "--servers (or give 0)";
  if (job.mode == sync_mode::allreduce && job.ring_op != reduce_op::sum && job.ring_op != reduce_op::avg)
    return "--allreduce-op must be sum or avg";
  if (job.ring_piece_elems < 1) return "the ring's pieces must hold at least one element";
  if (job.kv && ((job.servers < 1 && job.mode != sync_mode::allreduce) || job.pipeline_stages != 1 ||
                 job.local_reduce))
    return "a key-value job (launch ... -- COMMAND) needs --servers >= 1 (or --mode allreduce, whose workers reduce "
           "round a ring) and no --pipeline-stages or --local-reduce: its workers are users' programs with their own "
           "keys";
  if (job.servers == 0 && job.workers != 1 && job.mode != sync_mode::allreduce)
    return "--servers 0 applies the optimizer inside the stages of a single pipeline; use --workers 1 (or "
           "--replicas 1), give the replicas shard servers to share parameters through, or use --mode allreduce";
  if (job.microbatches < 1 || job.microbatches > 4096) return "--microbatches must be between 1 and 4096";
  if (job.local_reduce && job.mode == sync_mode::allreduce &&
      (job.pipeline_stages != 1 || job.simulate_compute_ms > 0))
    return "--local-reduce with --mode allreduce sums gradients within each node before one worker per node "
           "rings them; it needs one pipeline stage and real compute (no --simulate-compute)";
  if (job.local_reduce && job.mode != sync_mode::allreduce &&
      (job.mode != sync_mode::sync || job.pipeline_stages != 1 || job.servers == 0 || job.simulate_compute_ms > 0))
    return "--local-reduce sums gradients within each node before the shard servers (or, with --mode allreduce, "
           "the ring) see them; it needs --mode sync or allreduce, one pipeline stage, at least one shard server "
           "in sync, and real compute (no --simulate-compute)";
  return std::nullopt;
}

// validate(), what crosses the network: compression, buckets, pull precision.
std::optional<std::string> validate_transfers(const job_spec& job) {
  if (job.compression.kind != codec_kind::none && job.servers == 0)
    return "--compression packs the gradients pushed to shard servers; with --servers 0 nothing is pushed";
  if (job.bucket_bytes < 0)
    return "--bucket-bytes must be at least 0 (0: no buckets, whole pulls and pushes)";
  if (job.pull_precision.kind == codec_kind::two_bit && job.servers == 0)
    return "--pull-precision 2bit is for jobs with shard servers (a shard keeps what each member holds and sends "
           "the change); --servers 0 takes fp32, fp16 or bf16";
  return std::nullopt;
}

// validate(), the training itself: microbatches, schedule, cuts, epochs, batch, lr, modes, timeouts.
std::optional<std::string> validate_training(const job_spec& job) {
  if (job.microbatches > job.train.batch_size)
    return "--microbatches " + std::to_string(job.microbatches) + " splits a batch of " +
           std::to_string(job.train.batch_size) + " samples into empty parts; use at most --batch-size microbatches";
  if (job.schedule != pipeline_schedule::gpipe && job.schedule != pipeline_schedule::one_f_one_b)
    return "--schedule must be gpipe or 1f1b";
  if (!job.cuts.empty() && job.cuts.size() + 1 != job.pipeline_stages)
    return "--cuts gives " + std::to_string(job.cuts.size()) + " cut points, which make " +
           std::to_string(job.cuts.size() + 1) + " stages, but --pipeline-stages is " +
           std::to_string(job.pipeline_stages);
  if (job.train.epochs < 1) return "--epochs must be at least 1";
  if (job.train.batch_size < 1) return "--batch-size must be at least 1";
  if (!(job.train.lr > 0.f)) return "--lr must be positive";
  if (job.staleness < 0) return "--staleness must be 0 or more";
  if (job.mode != sync_mode::sync && job.mode != sync_mode::async && job.mode != sync_mode::ssp &&
      job.mode != sync_mode::allreduce)
    return "--mode must be sync, async, ssp or allreduce";
  if (job.simulate_compute_ms < 0.0) return "--simulate-compute must be 0 or more milliseconds";
  if (job.slow_worker >= static_cast<std::int32_t>(members(job)))
    return "--slow-worker names member " + std::to_string(job.slow_worker) + " but members are 0.." +
           std::to_string(members(job) - 1) + (job.pipeline_stages > 1 ? " (replica * stages + stage)" : "");
  if (job.slow_factor < 1.0) return "--slow-worker FACTOR must be at least 1";
  if (job.request_timeout_ms < 1 || job.stall_timeout_ms < 1) return "timeouts must be positive";
  return std::nullopt;
}

// validate(), checkpoints.
std::optional<std::string> validate_checkpoints(const job_spec& job) {
  if (!job.checkpoints.dir.empty() && job.simulate_compute_ms > 0)
    return "--checkpoint-dir keeps the parameters and the optimizer's state of a training job; it needs real "
           "compute (no --simulate-compute)";
  if (!job.checkpoints.dir.empty() && job.kv && (job.checkpoints.every < 1 || job.checkpoints.seconds > 0.0))
    return "--checkpoint-dir in a key-value job (launch ... -- COMMAND) needs --checkpoint-every N: its programs' "
           "keys are checkpointed every N rounds (it has no epochs, and --checkpoint-seconds is for training jobs)";
  if (!job.checkpoints.dir.empty() && rings_kv_members(job))
    return "--checkpoint-dir keeps what shard servers hold; with --mode allreduce and a command every worker holds "
           "its own parameters, so save them from the loop (rank 0's torch.save, for one) and leave it out";
  if (job.checkpoints.every < 0) return "--checkpoint-every must be 0 (every epoch's end only) or more steps";
  if (!(job.checkpoints.seconds >= 0.0)) return "--checkpoint-seconds must be 0 (off) or more seconds";
  if (job.checkpoints.keep < 1) return "--keep-checkpoints must be at least 1";
  if (job.checkpoints.queue < 1) return "--checkpoint-queue must be at least 1 (checkpoints waiting for the disk)";
  if (job.checkpoints.on_shard_loss == shard_loss::recover && job.servers == 0)
    return "--on-shard-loss recover restores a lost shard server's state in place from the newest checkpoint once a "
           "replacement has joined; this job has no shard servers to lose; leave it out";
  return std::nullopt;
}

// validate(), the rules for asynchrony and stragglers, and the training set against the workers.
std::optional<std::string> validate_rules(const job_spec& job) {
  if (job.critical_batch < 0) return "--critical-batch must be 0 (linear scaling without a cap) or more samples";
  if (job.backup_workers < 0) return "--backup-workers must be 0 or more";
  if (!(job.straggler_factor == 0.0 || (job.straggler_factor >= 1.0 && std::isfinite(job.straggler_factor))))
    return "--straggler-factor must be 0 (never leave a straggler out of the ssp bound) or a finite number >= 1";
  if (job.balance_shares == share_balance::on &&
      (job.pipeline_stages != 1 || job.servers == 0 || job.local_reduce || job.kv || job.workers < 2))
    return "--share-balance on moves rows of a slow worker's share to the others; it needs 2 or more workers, shard "
           "servers, one pipeline stage, no --local-reduce, and a training job";
  if (job.min_workers > 0 && !job.kv && job.mode != sync_mode::allreduce)
    return "--min-workers: " + std::string(name_of(job.mode)) +
           " training jobs go on without a lost worker already (its samples go to the others); it is for key-value "
           "jobs (launch ... -- COMMAND) and --mode allreduce, whose ring cannot. Leave it out";
  if (job.min_workers > 0 && rings_kv_members(job))
    return "--min-workers: the ring of --mode allreduce with a command cannot go on without a worker yet (each "
           "call's pieces pass through every worker); leave it out";
  if (job.min_workers > job.workers)
    return "--min-workers " + std::to_string(job.min_workers) + " is more than the job's " +
           std::to_string(job.workers) + " workers; give at most " + std::to_string(job.workers);
  if (job.backup_workers > 0 && (job.mode != sync_mode::sync || job.local_reduce || job.servers == 0))
    return "--backup-workers closes a sync round without the slowest workers' gradients; it needs --mode sync, "
           "shard servers and no --local-reduce";
  if (job.backup_workers > 0 && static_cast<std::uint32_t>(job.backup_workers) >= job.workers)
    return "--backup-workers " + std::to_string(job.backup_workers) + " leaves no worker whose gradient a round waits "
           "for: use fewer than --workers (" + std::to_string(job.workers) + ")";
  if (!(job.dc_lambda >= 0.f && std::isfinite(job.dc_lambda)))
    return "--dc-lambda must be a finite number >= 0 (DC-ASGD's compensation weight; MXNet's default is 0.04)";
  if (job.train_size > 0 && job.train_size < static_cast<std::int64_t>(job.workers))
    return "the training set has " + std::to_string(job.train_size) + " samples, fewer than the " +
           std::to_string(job.workers) + " workers";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> validate(const job_spec& job) {
  for (auto check : {validate_layout, validate_transfers, validate_training, validate_checkpoints, validate_rules})
    if (auto why = check(job)) return why;
  return std::nullopt;
}

std::uint32_t members(const job_spec& job) { return job.workers * job.pipeline_stages; }

std::int64_t samples_per_worker(const job_spec& job) { return job.train_size / job.workers; }

std::int64_t steps_per_epoch(const job_spec& job) {
  return (samples_per_worker(job) + job.train.batch_size - 1) / job.train.batch_size;
}

std::int64_t samples_before(const job_spec& job, std::int64_t clock) {
  const std::int64_t spe = std::max<std::int64_t>(1, steps_per_epoch(job));
  std::int64_t n = clock / spe * samples_per_worker(job);
  for (std::int64_t s = 0; s < clock % spe; ++s) n += batch_rows(job, s);
  return n;
}

std::int64_t batch_rows(const job_spec& job, std::int64_t step_in_epoch) {
  return std::min(job.train.batch_size, samples_per_worker(job) - step_in_epoch * job.train.batch_size);
}

batch_choice auto_batch(const job_spec& job) {
  constexpr std::int64_t fewest = 8, fewest_async = 4;
  const std::int64_t n = std::max<std::uint32_t>(1, job.workers);
  if (n == 1 || job.kv || job.pipeline_stages > 1) return {};
  // Averaged in the ring: each replica trains the reference batch at the given lr (Horovod's way).
  if (job.mode == sync_mode::allreduce && job.ring_op == reduce_op::avg) return {};
  if (in_lockstep(job.mode)) {
    if (job.critical_batch <= 0) return {};
    const std::int64_t b = std::clamp((job.critical_batch + n - 1) / n, fewest, reference_batch);
    return {b, static_cast<float>(b) / static_cast<float>(reference_batch)};
  }
  if (n <= async_warmup_workers) return {std::clamp((reference_batch + n - 1) / n, fewest, reference_batch), 1.f};
  // Past 8 pushers the job's batch shrinks as 8 / N, at the same lr per sample (never
  // above the lr as given: past 32 workers the floor of 4 grows the job's batch again).
  const std::int64_t across = reference_batch * async_warmup_workers / n;
  const std::int64_t b = std::clamp((across + n - 1) / n, fewest_async, reference_batch);
  return {b, std::min(1.f, static_cast<float>(b * n) / static_cast<float>(reference_batch))};
}

lr_schedule job_schedule(const job_spec& job) {
  const lr_schedule s = make_schedule(job.train, samples_per_worker(job));
  if (job.mode == sync_mode::allreduce && job.ring_op == reduce_op::avg) return s;  // the user's lr, per replica
  if (!in_lockstep(job.mode))  // Note [Warm-up of asynchrony]
    return job.kv || job.async_correction == async_rule::none ? s : warm_up_for_asynchrony(s, job.workers);
  // Note [Critical batch]: a round sums the gradients of the workers it waits for.
  return cap_at_critical_batch(s, job.workers - static_cast<std::uint32_t>(job.backup_workers), job.train.batch_size,
                               job.critical_batch);
}

expected<model> build_model(const job_spec& job) {
  auto spec = parse_model_spec(job.train.model);
  if (!spec) return spec.error();
  return model::build(*spec, shape(std::span<const std::int64_t>(job.input_shape)), job.num_classes);
}

std::vector<stage_span> job_stage_spans(const job_spec& job, const model& m) {
  return stage_spans(m, std::vector<int>(job.cuts.begin(), job.cuts.end()));
}

std::int64_t microbatch_begin(std::int64_t b, int parts, int i) { return b * i / parts; }

std::int64_t microbatch_rows(std::int64_t b, int parts, int i) {
  return microbatch_begin(b, parts, i + 1) - microbatch_begin(b, parts, i);
}

int microbatches_for(const job_spec& job, std::int64_t b) {
  return static_cast<int>(std::min<std::int64_t>(job.microbatches, b));
}

}  // namespace troupe
