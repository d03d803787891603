// The messages of Troupe's protocol as plain structs, free of CAF, so the cores can take
// and return them: actors/protocol.hpp gives them their inspect overloads, type IDs and
// the typed interfaces that carry them. Who sends each to whom is said above it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/job.hpp"
#include "core/key_table.hpp"
#include "tensor/tensor.hpp"
#include "transport/lane_offer.hpp"
#include "transport/lane_tensor.hpp"
#include "transport/shared_tensor.hpp"

namespace troupe {

// Shard -> coordinator: the shard's whole buffer, its key ranges in table order (a
// snapshot for an evaluation or the job's result). A member's pushes and pulls are
// kv_push and kv_pull (core/kv_messages.hpp).
struct params_reply {
  std::uint32_t shard = 0;
  std::int64_t version = 0;
  tensor params;  // (shard_numel) f32
};

struct membership {
  std::vector<std::uint32_t> workers;  // live members
  std::vector<std::uint32_t> stages;   // each one's pipeline stage (empty: all 0)
  std::int64_t clock = 0;              // the clock they start at (a resumed job's)
};

struct shard_stats {
  std::uint32_t shard = 0;
  std::int64_t version = 0, updates = 0, gradients = 0, rejected = 0, pulls = 0, pulls_held = 0;
  std::int64_t held_now = 0;
  std::int64_t staleness_sum = 0, staleness_count = 0, staleness_max = 0;
  std::vector<std::int64_t> staleness_hist;
};

// Shard -> coordinator. host/port: where workers reach this shard directly (empty in
// one process, where the shard's handle is enough).
// proof: of the job's secret (Note [Join proofs] in net/job_secret.hpp); empty when the
// node has none, which only a coordinator without a secret accepts.
struct shard_join {
  std::string job_id;
  std::string host;
  std::uint16_t port = 0;
  std::string proof;
};

// Coordinator -> shard, in a job resumed from a checkpoint: where the shard's state
// comes from (Note [Shard checkpoints] in core/shard_checkpoint.hpp).
struct shard_resume {
  std::string dir;                 // the checkpoint's directory; empty: a fresh start
  std::vector<std::string> files;  // every old shard's file in it, by old shard index
  std::int64_t clock = 0;          // the clock the members go on from
};

struct shard_welcome {
  std::uint32_t index = 0;
  job_spec job;
  std::vector<key_range> ranges;  // this shard's, in buffer order
  shard_resume resume;
};

// Shard -> coordinator: its file of checkpoint `step` is written, or why not (Note
// [Checkpoint steps] in core/shard_core.hpp).
struct checkpoint_saved {
  std::uint32_t shard = 0;
  std::int64_t step = 0;
  std::int64_t version = 0;  // the shard's when the state was taken
  std::string file;          // its name in the checkpoint's directory
  std::string error;         // empty: written
};

// Shard -> coordinator: a key-value job's shard took its image of checkpoint `step` and
// writes it now; its checkpoint_saved follows (Note [The last checkpoints of a key-value
// job] in core/job_keys.cpp).
struct checkpoint_begun {
  std::uint32_t shard = 0;
  std::int64_t step = 0;
};

// A member (worker, or pipeline stage) -> coordinator. host/port: where its pipeline
// neighbours reach it directly (empty in one process).
struct worker_join {
  std::string job_id;
  std::string host;
  std::uint16_t port = 0;
  // Who can form a local group with whom: equal non-empty strings can ("cuda@host" for
  // GPUs of one machine, "cpu@host:pid" for threads of one process).
  std::string locality;
  std::string proof;  // as shard_join's
  // The rank this member asks for (a launched worker's TROUPE_WORKER_INDEX), or -1 for
  // any. Key-value jobs grant it before the start when it is below the job's worker count
  // and free, and so do training jobs; other members get the lowest free rank.
  std::int32_t wanted_rank = -1;
};

// Coordinator -> member: its place in the job. actors/protocol.hpp's worker_welcome
// carries it, with the handles of the shards and neighbours when they share a process.
struct member_assignment {
  std::uint32_t rank = 0;                 // member id: replica * pipeline_stages + stage
  std::uint32_t world = 0;                // replicas
  job_spec job;
  key_table table;
  std::vector<std::string> shard_hosts;   // where to reach the shards directly; empty in one process
  std::vector<std::uint16_t> shard_ports;
  std::int64_t resume_clock = 0;          // > 0 when this member replaces one that died
  // Pipeline neighbours (stage - 1 and stage + 1 of the same replica) across nodes; empty
  // at the ends and in one process.
  std::string prev_host, next_host;
  std::uint16_t prev_port = 0, next_port = 0;
  // --mode allreduce across nodes: the same stage of the previous and the next replica in
  // the ring (Note [Ring connections] in core/ring_handshake.hpp); empty in one process.
  std::string ring_prev_host, ring_next_host;
  std::uint16_t ring_prev_port = 0, ring_next_port = 0;
  // --mode allreduce: the replicas whose same stage forms this member's ring, ascending
  // (Note [Rings of leaders] in core/ring_seats.cpp); a member whose replica is not in it
  // takes no part in the ring.
  std::vector<std::uint32_t> ring;
  // --local-reduce: the members of this member's local group, ascending (the first leads);
  // empty when it pushes and pulls on its own.
  std::vector<std::uint32_t> group;
  // A resumed job whose members hold the parameters (--mode allreduce, --servers 0): the
  // checkpoint each member restores its stage's state from (Note [Members' checkpoints]
  // in core/member_checkpoint.cpp); empty dir otherwise.
  shard_resume resume;
};

// Stage i -> stage i + 1 across nodes, once connected: "I am your previous stage" (Note
// [One connection per neighbour pair] in actors/member_wiring.cpp).
struct stage_hello {
  std::uint32_t replica = 0, stage = 0;
};

// --mode allreduce between processes of one host (Note [Ring mailboxes] in
// transport/ring_mailbox.hpp): a replica offers its next replica in the ring the mailbox it
// writes its pieces into (`answer` false), and that one answers whether it mapped it
// (`why`: the reason it did not).
struct ring_mailbox_offer {
  bool answer = false;
  std::string segment;
  bool accepted = false;
  std::string why;
};

// A local group's leader -> the coordinator -> the group's other members: the id of the
// group's communicator (an NCCL unique id, or the CPU backend's).
struct group_id {
  std::uint32_t leader = 0;
  std::vector<std::uint8_t> id;
};

// Pipeline stage -> the next stage: the output of `stage` for one microbatch of the
// replica's minibatch at clock `step`: (rows, next stage's input shape...) f32.
struct activation {
  std::uint32_t replica = 0, stage = 0;  // the sender
  std::int64_t step = 0;
  std::int32_t microbatch = 0;
  tensor data;
};

// Pipeline stage -> the previous stage: dL/d(its output) for one microbatch.
struct activation_grad {
  std::uint32_t replica = 0, stage = 0;  // the sender
  std::int64_t step = 0;
  std::int32_t microbatch = 0;
  tensor data;
};

// Coordinator -> shard: worker `rank` (re)joins a running job at `clock`.
struct member_joined {
  std::uint32_t rank = 0;
  std::int64_t clock = 0;
};


// Worker -> coordinator after every step. A pipeline's loss and samples come from its
// last stage (the others report 0); every stage reports its busy time and the wall-clock
// window from its first forward's start to its last backward's end, from which the
// coordinator measures the bubble (Note [Measuring the bubble] in bubble_meter.cpp).
struct step_report {
  std::uint32_t rank = 0;
  std::int64_t clock = 0;         // iterations finished
  std::int32_t epoch = 0;
  double loss = 0.0;
  std::int64_t samples = 0;       // in this step
  double busy_seconds = 0.0;      // computing forwards and backwards
  std::int64_t window_begin_us = 0, window_end_us = 0;  // system clock, microseconds
  // of the samples reported before, those whose gradient a shard dropped as late
  // (Note [Backup workers] in core/shard_core_rules.cpp), learned since the last report
  std::int64_t samples_dropped = 0;
};

// Worker -> coordinator at the end of each of its epochs.
struct worker_epoch {
  std::uint32_t rank = 0;
  std::int32_t epoch = 0;
  double loss_sum = 0.0;
  std::int64_t steps = 0;
  std::int64_t samples = 0;
  double seconds = 0.0;
  tensor params;                  // --servers 0: the stage's parameters after the epoch
  // --mode allreduce: FNV-1a of the stage's parameters after the epoch, which every
  // replica's must equal (Note [Replicas agree] in core/job_watch.cpp); 0: not reported.
  std::uint64_t params_fnv1a = 0;
};

struct worker_done {
  std::uint32_t rank = 0;
  std::int64_t clock = 0;
  std::int64_t rejected = 0;      // of its pushes
  std::int32_t peak_stored = 0;   // most microbatch activations it held at once
  std::int64_t bytes_pushed = 0;  // gradient bytes its pushes carried, as encoded
  std::int64_t samples_dropped = 0;  // as step_report's, learned after the last report
};

// Coordinator -> member: extra rows for its steps [from_step, steps per epoch) of `epoch`:
// positions of that epoch's permutation that a lost worker did not train, spread evenly
// over those steps (Note [Dealing a lost worker's samples] in core/sample_deal.hpp).
struct rows_grant {
  std::uint64_t id = 0;
  std::int32_t epoch = 0;
  std::int64_t from_step = 0;
  std::vector<std::int64_t> positions;
};

// Coordinator -> member: from clock `not_before` (or its first step not begun, if later),
// train only the first `keep` rows of its own share of each step; the others go to faster
// members (Note [Balancing shares] in core/sample_deal.hpp).
struct rows_shed {
  std::uint64_t id = 0;
  std::int64_t keep = 0;
  std::int64_t not_before = 0;
};

// Member -> coordinator, for every grant: taken, or returned (its first step had begun,
// or the member had finished); for every shed: taken from `from_clock`, or refused (the
// member had finished).
struct rows_answer {
  std::uint32_t rank = 0;
  std::uint64_t id = 0;
  bool taken = false;
  std::int64_t from_clock = 0;
};

struct eval_request {
  std::int32_t epoch = 0;
  tensor params;                  // the full flat parameter vector
};

struct eval_reply {
  std::int32_t epoch = 0;
  double accuracy = 0.0;
  double loss = 0.0;
};

struct job_result {
  std::string mode;
  std::uint32_t workers = 0, servers = 0;
  std::int32_t epochs = 0;
  bool evaluated = false;         // false with --simulate-compute
  double test_accuracy = 0.0, test_loss = 0.0;
  std::int32_t accuracy_at_chance_epoch = -1;  // the first epoch evaluated at chance (Note [Accuracy at chance]); -1: none
  double train_seconds = 0.0;
  double samples_per_second = 0.0;
  // samples/s up to the moment the first worker finished: the rate while every worker
  // was still training (what a straggler costs the others, independent of how long the
  // slowest one takes to finish its own shard)
  double steady_samples_per_second = 0.0;
  std::int64_t samples = 0;
  // What the job set out to train: each worker's share of the training set, every epoch.
  // Fewer were trained when a worker was lost and nobody took over its share.
  std::int64_t samples_planned = 0;
  // computed, but a shard dropped their gradient as late (--backup-workers); not in `samples`
  std::int64_t samples_dropped = 0;
  // a lost worker's samples granted to the others (Note [Dealing a lost worker's samples])
  std::int64_t samples_redealt = 0;
  double mean_staleness = 0.0;
  std::int64_t max_staleness = 0;
  std::int64_t workers_lost = 0;
  std::int64_t rejected = 0;
  std::uint32_t pipeline_stages = 1;
  std::int32_t microbatches = 1;
  double bubble = 0.0;            // pipelines: measured over the whole job
  std::vector<std::int32_t> peak_stored;  // per stage: most activations any replica's stage held
  double push_bytes_per_step = 0.0;  // gradient bytes a member's step pushed, as encoded, over the members that finished
  std::int64_t resumed_from_step = -1;  // the checkpoint this run resumed from (Note [Resuming a job]); -1: none
  std::int64_t steps_replayed = -1;     // of the lost run's, this run repeats (Note [Steps replayed]); -1: not known
  // After a lost shard server (Note [Restarting in place] in actors/coordinator_restart.cpp);
  // a key-value job's: shards replaced (Note [Replacing a key-value shard]).
  std::int64_t restarts_in_place = 0;
  std::int64_t checkpoints_written = 0, checkpoints_failed = 0;
  tensor params;                  // the final parameters (empty with --simulate-compute)
};

}  // namespace troupe
