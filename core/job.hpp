// The job spec: everything every node must agree on to train one job (model and
// hyper-parameters, data, the cluster's shape, the consistency mode and the time limits),
// plus the derived quantities all roles compute the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/errc.hpp"
#include "base/expected.hpp"
#include "core/pipeline_layout.hpp"
#include "core/pipeline_schedule.hpp"
#include "core/ring_collective.hpp"
#include "core/update_rules.hpp"
#include "tensor/grad_codec.hpp"
#include "train/dataset.hpp"
#include "train/trainer.hpp"

namespace troupe {

// sync: one averaged update per round from all live workers (MXNet's dist_sync).
// async: each gradient applied on arrival (dist_async).
// ssp: applied on arrival, but a worker may run at most `staleness` clocks ahead of the slowest.
// allreduce: no shard servers; every replica holds the parameters and the optimizer, and
// the replicas sum (or average) their gradients in a ring each step (Horovod's way;
// Note [Ring all-reduce of gradients] in core/member_ring.cpp).
enum class sync_mode : std::uint8_t { sync = 0, async = 1, ssp = 2, allreduce = 3 };
expected<sync_mode> parse_sync_mode(std::string_view name);
std::string_view name_of(sync_mode m);
// Every replica's step-k gradient goes into one update (a sync round, or a ring's sum).
inline bool in_lockstep(sync_mode m) { return m == sync_mode::sync || m == sync_mode::allreduce; }

// What a job does when it loses a shard server (--on-shard-loss): end (`fail`), or
// restart in place from its newest checkpoint once a replacement has joined (`recover`;
// Note [Restarting in place] in actors/coordinator_restart.cpp). `automatic`, the default,
// recovers when the job keeps checkpoints.
enum class shard_loss : std::uint8_t { automatic = 0, fail = 1, recover = 2 };
expected<shard_loss> parse_shard_loss(std::string_view name);
std::string_view name_of(shard_loss p);

// Checkpoints (Note [Checkpoint directory] in core/checkpoint_store.hpp, Note [Checkpoint
// steps] in core/shard_core.hpp). The directory must be one every shard server and the
// coordinator reach under that path (one host, or a shared file system).
struct checkpoint_plan {
  std::string dir;          // empty: no checkpoints
  std::int64_t every = 0;   // steps between checkpoints, besides every epoch's end; 0: epoch ends only
  double seconds = 0.0;     // also about this often (the coordinator names a coming step); 0: not
  std::int32_t keep = 2;    // complete checkpoints kept
  bool fatal = false;       // a checkpoint that cannot be written ends the job; else warn, count, go on
  std::int32_t queue = 2;   // images that may wait for the disk behind the one being written; a later one is skipped
  shard_loss on_shard_loss = shard_loss::automatic;
};

// --share-balance (job_spec::balance_shares).
enum class share_balance : std::uint8_t { automatic = 0, on = 1, off = 2 };

struct job_spec {
  job_spec() { train.epochs = 3; }

  std::string job_id;                 // unique per job; every join must carry it
  local_train_config train;           // model, epochs, batch, lr, optimizer, schedule, seed
  std::string dataset = "fashion-mnist";
  std::string data_dir;
  std::int64_t train_samples = 0;     // use only the first N training samples (0 = all)
  std::int64_t context = 256;         // text datasets: characters a sample (train/text_dataset.hpp)
  std::int64_t train_size = 0;        // training samples in use; set once the data is loaded
  std::vector<std::int64_t> input_shape;  // per sample, e.g. {1, 28, 28}; set with train_size
  std::int64_t num_classes = 0;           // set with train_size
  std::uint32_t workers = 2;          // data-parallel replicas (each a pipeline of pipeline_stages)
  std::uint32_t servers = 2;          // 0: a single pipeline applies the optimizer in its stages
  std::uint32_t pipeline_stages = 1;  // K: the model cut into K stages, one actor each
  std::int32_t microbatches = 1;      // M: a minibatch runs through the pipeline in M parts
  pipeline_schedule schedule = pipeline_schedule::one_f_one_b;
  stage_balance balance = stage_balance::time;  // Note [Cuts by measured time] in core/job.cpp
  std::vector<std::int32_t> cuts;     // K - 1 layer indices; empty until prepare_job balances them
  sync_mode mode = sync_mode::async;
  std::int32_t staleness = 2;         // ssp bound
  // allreduce: sum (what a sync round applies, so the lr means the same) or avg
  // (Horovod's default: the lr is per replica's batch).
  reduce_op ring_op = reduce_op::sum;
  std::int64_t ring_piece_elems = std::int64_t{1} << 16;  // allreduce: floats per ring piece
  bool staleness_lr = false;          // async/ssp: lr / max(1, staleness)
  // async/ssp: how shards correct for staleness (Note [Momentum per member] in
  // core/member_momenta.hpp; Note [Momentum of asynchrony], Note [Delay compensation] in
  // core/update_rules.hpp), and DC-ASGD's lambda.
  async_rule async_correction = async_rule::dana;
  float dc_lambda = 0.04f;
  // sync: the workers' total batch beyond which the lr stops growing (Note [Critical
  // batch]); 0: linear scaling without a cap.
  std::int64_t critical_batch = 256;
  // sync: a round closes with the first (replicas - backup_workers) gradients of each
  // stage's slice; later ones are dropped and counted, and their senders skip to the open
  // round (Note [Backup workers] in core/shard_core_rules.cpp). 0: every live member, bitwise
  // reproducible.
  std::int32_t backup_workers = 0;
  // Elastic (Note [Leaving out lost workers] in tools/launch_restarts.hpp, Note [Jobs of
  // keys] in core/job_keys.cpp): the fewest workers the job goes on with; 0: not elastic.
  // A key-value job ends with workers_lost once fewer live; --mode allreduce re-forms its
  // ring from the survivors while at least this many remain.
  std::uint32_t min_workers = 0;
  // ssp: a member whose compute per step exceeds this many times the median is left out
  // of the staleness bound while it is slow (Note [Naming stragglers] in
  // core/job_stragglers.cpp); 0: never.
  double straggler_factor = 2.0;
  // A slow worker trains fewer of its own rows a step and the others the rest (Note
  // [Balancing shares] in core/sample_deal.hpp): automatic is on in async and ssp, off in
  // sync (bitwise reproducible; --backup-workers is its answer to a straggler).
  share_balance balance_shares = share_balance::automatic;
  std::int64_t big_array_bound = 0;   // split blocks above this many floats (0 = automatic)
  double simulate_compute_ms = 0.0;   // > 0: replace forward/backward by a delay and a synthetic gradient
  std::int32_t slow_worker = -1;      // member slowed down by slow_factor (-1 = none)
  double slow_factor = 1.0;
  std::int64_t request_timeout_ms = 300000;  // every request to another actor
  std::int64_t stall_timeout_ms = 120000;    // no worker progress for this long fails the job
  // sync, one stage: the workers of one node sum their gradients among themselves (NCCL
  // between GPUs, threads in one process on the CPU) and only each node's leader pushes
  // the sum and pulls (Note [Local groups] in core/local_groups.cpp).
  bool local_reduce = false;
  // How pushes carry gradients (none, fp16, bf16, 2-bit with error feedback; Note [2-bit
  // gradients] in tensor/grad_codec.hpp) and pulls carry parameters (none = f32, fp16,
  // bf16), worker -> shard and shard -> worker over the network. The same-host fast path
  // carries parameters as f32 (it moves no bytes over a wire).
  grad_codec compression;
  grad_codec pull_precision;
  // Members push each gradient bucket of at least this many bytes as soon as backward has
  // produced it (Note [Gradient buckets] in core/gradient_buckets.hpp); 0: one push per
  // shard after backward.
  std::int64_t bucket_bytes = std::int64_t{1} << 20;
  // A key-value job: the members are users' training loops (the client library) that
  // define their own keys; there is no model, dataset or epoch (Note [Rounds per part] in
  // core/shard_core.hpp).
  bool kv = false;
  checkpoint_plan checkpoints;
  // The batch and lr came from --batch-size auto (Note [The job's batch]).
  bool batch_auto = false;
};

// The first problem with the spec, as a message naming the flag; nullopt when valid.
std::optional<std::string> validate(const job_spec& job);

// Fills in the data-dependent fields (train_size, input_shape, num_classes), a fresh job
// id if there is none, the pipeline's cut points (balanced when not given), and checks
// the result, including that the model fits the data and the cuts fit the model. When it
// balances the cuts and `cut_note` is given, it says there how: the cuts, what they were
// balanced by, and each stage's share.
expected<model> prepare_job(job_spec& job, const dataset_split& data, std::string* cut_note = nullptr);
// "pipeline: cut at layer 4, balanced by ...; stage 0 55% (3.10 ms), stage 1 45% ...":
// what prepare_job's cut note says, for cuts balanced `by` with these stage costs.
std::string describe_cuts(const std::vector<int>& cuts, stage_balance by, const std::vector<double>& stage_cost,
                          std::int64_t rows);

// Members: the actors that train, workers * pipeline_stages. Member m is stage
// m % pipeline_stages of replica m / pipeline_stages; with one stage, member = rank.
std::uint32_t members(const job_spec& job);
// Whether a lost shard server is replaced in place (--on-shard-loss; needs
// --checkpoint-dir and shard servers) instead of ending the job: a training job restarts
// in place (Note [Restarting in place] in actors/coordinator_restart.cpp), a key-value
// job's replacement restores the lost shard's keys while the loops go on (Note
// [Replacing a key-value shard] in core/job_shard_replacement.cpp).
bool restarts_on_shard_loss(const job_spec& job);
// A key-value job whose lost shard is replaced while its members go on (Note [Replacing
// a key-value shard]); the job's core and every member's store decide it alike.
bool replaces_kv_shards(const job_spec& job);
// A key-value job with no shard servers, whose members reduce round a ring of their own
// (Note [A ring of users' loops] in client/kv_member_ring.cpp): --mode allreduce with a
// command.
bool rings_kv_members(const job_spec& job);
// Note [Parked members] (actors/stage_parking.cpp): whether a member of `job` that would
// stop with `f` (a shard gone, a pull or connection that failed) waits for the
// coordinator's restart in place instead.
bool waits_for_restart(const job_spec& job, const fault& f);

// Samples each worker owns per epoch, and the steps that takes (the last batch may be short).
std::int64_t samples_per_worker(const job_spec& job);
std::int64_t steps_per_epoch(const job_spec& job);
// Samples one worker trains in its clocks [0, clock).
std::int64_t samples_before(const job_spec& job, std::int64_t clock);
// Rows of a worker's minibatch at step_in_epoch (the last one of an epoch may be short).
std::int64_t batch_rows(const job_spec& job, std::int64_t step_in_epoch);
// Note [The job's batch]
// At a fixed batch per worker, more workers make fewer updates of an epoch: sync at 16
// workers of 128 sums 2048 samples a round, 146 rounds in 5 epochs against 2345 steps of
// one worker; in async each of N workers' pushes lands on parameters about N - 1 updates
// old, and the job takes N times the samples per update of staleness. Measured, the MLP on
// Fashion-MNIST, 5 epochs, 4/8/16 workers of 128: sync 88.40/87.82/86.90%, async
// 87.56/86.20/84.76% (docs/benchmarks.md, "Distributed accuracy at the defaults"). So `--batch-size
// auto`, the default, keeps the job's batch as workers are added: one worker trains the
// reference batch (128, what the lr is tuned for); in sync each worker trains
// ceil(C / N) of the critical batch C (256) at lr * B / 128, so a round's sum steps as two
// workers of 128 do at the lr; in async and ssp each trains ceil(128 / N) at the lr as
// given, so N workers push as often, per sample, as one worker of 128 steps and the
// momentum rule makes up for the staleness. Past 8 asynchronous workers the job's batch
// shrinks as 8 / N (64 across at 16 workers, 4 a worker), at lr * N * B / 128 so the step
// per sample stays: a push lands on parameters N - 1 updates old, and smaller updates
// move them less in that time. Measured, 16 workers: async 88.60% on average in 8 runs at
// 8 a worker, 88.83% in 5 at 4 (one worker at 8 and that step per sample, no staleness:
// 88.90%), ssp 88.79% at 4; at 8 workers 8 a worker gained 0.11 points (88.63% to
// 88.74%), too little for half the samples/s, so 8 is where the shrinking starts. Never
// below 8 a worker in sync nor 4 in async, nor above 128 (past 32 workers in sync and in
// async the job's batch grows again). Measured the same way with auto, before the
// shrinking: sync 88.84/88.99/88.84%, async 88.70/88.39/88.68%, ssp 88.46/88.58/88.43%, and
// the CNN in async at 4 workers 91.45% against 87.68% at 128 a worker. The price is
// samples/s where a step's fixed cost dominates: the MLP in async at 16 workers on two
// cores made 11.1k samples/s at 4 a worker, 22.9k at 8 and 80k at 128. `--batch-size N`
// fixes the batch per worker (and --lr is then the step of each worker's batch, as before).
// Sync with --critical-batch 0 (linear scaling), pipelines and key-value jobs keep 128.
struct batch_choice {
  std::int64_t batch = reference_batch;  // per worker
  float lr_factor = 1.f;                 // on --lr
};
batch_choice auto_batch(const job_spec& job);

// The learning-rate schedule, indexed by a worker's clock (its step count).
lr_schedule job_schedule(const job_spec& job);
// The model of the job, for its input_shape and num_classes.
expected<model> build_model(const job_spec& job);
// The job's pipeline stages over m (one stage spanning m without a pipeline).
std::vector<stage_span> job_stage_spans(const job_spec& job, const model& m);
// A minibatch of b samples splits into `parts` consecutive microbatches whose sizes
// differ by at most one: where microbatch i starts, and its rows.
std::int64_t microbatch_rows(std::int64_t b, int parts, int i);
std::int64_t microbatch_begin(std::int64_t b, int parts, int i);
// Microbatches a minibatch of b samples runs as: min(microbatches, b).
int microbatches_for(const job_spec& job, std::int64_t b);

}  // namespace troupe
