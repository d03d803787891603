// The logic of one parameter shard, free of CAF so it can be tested step by step: it owns
// the shard's parameters, their optimizer state and version, validates every gradient,
// applies updates according to the consistency mode, and decides which pulls are
// answered now and which are held. The shard_server actor wraps it and turns held pulls
// into response promises.
//
// Note [Clocks, rounds and versions]
// A worker's clock is the number of iterations it has finished. Iteration c pulls with
// clock c, computes on what it got, and pushes with clock c. The shard's version counts
// the updates it has applied.
//   sync:  round r collects the clock-r gradient of every live worker; when the last one
//          arrives (or its sender leaves) the gradients are summed in rank order and
//          applied once, so version == completed rounds. A pull at clock c is held until
//          version >= c. A rejected gradient counts as "submitted nothing", so one bad
//          worker cannot stall a round.
// The sync update uses the sum, as MXNet's dist_sync does, not the mean: each worker's
// gradient moves the parameters by lr per worker batch in every mode, which for sync is
// the linear scaling rule (N workers of batch B act like one of batch N*B at N*lr).
//   async: every valid gradient is applied on arrival. Pulls are never held.
//   ssp:   like async, but a pull at clock c is held until every live worker has
//          finished at least c - staleness iterations.
// staleness of a gradient = version at arrival - version the worker computed on.
//
// Note [Backup workers]
// With backup_workers b > 0 (sync only), a round closes as soon as every stage's slice
// has the gradients of all but b of its live members (at least one), as in "Revisiting
// Distributed Synchronous SGD" (Chen et al.): the b slowest are not waited for. A gradient
// for a round that has closed is late: it is dropped, counted, and answered without an
// error, with the open round as its version, so its sender skips to that round (its
// samples of the rounds in between are not trained, and it reports the late gradient's
// samples as dropped). The sum is in rank order over the gradients that made it, so a
// round's result depends on which members were first: with b > 0 a run is not bitwise
// reproducible. Each shard closes its rounds on its own, so one member's gradient of a
// round may make it on one shard and be late on another (each variable's accumulator
// in TensorFlow's SyncReplicasOptimizer behaves the same way). The lr schedule scales
// for the gradients a round sums, workers - b (Note [Critical batch]).
//
// Note [Stragglers outside the bound]
// In ssp the coordinator names a member whose compute per step is well above the median
// a straggler (Note [Naming stragglers] in core/job_stragglers.cpp) and says so to every
// shard. While it is one, the bound leaves it out: a pull at clock c waits only until
// every other live member has finished c - s iterations, so one slow machine no longer
// holds everyone at its pace. Its gradients are still applied, at lr / max(1, staleness)
// (--staleness-lr's rule, for its gradients alone), since they are computed on
// parameters many updates old. Once the coordinator no longer names it, it counts for the
// bound again only when it has caught up with the slowest of the others, so nobody waits
// for the lead it lost while it was slow. Textbook SSP bounds every worker's staleness;
// this bounds the staleness the others see from each other, and lets a named straggler's
// be larger. Checkpoints still wait for the slowest member (Note [Checkpoint steps]).
//
// Note [Slices]
// Members are the actors that push and pull: data-parallel workers, or the stages of
// pipeline replicas. A member of stage k owns the slice of the shard's buffer that holds
// stage k's parameters (for a plain worker, stage 0 of 1: the whole buffer); it pushes
// and pulls exactly that slice, packed in buffer order. A sync round sums each stage's
// contributions in member order (the first copies, the rest add) and applies one update
// to the whole buffer; async and ssp apply a push to its slice alone.
//
// Note [Gradient pieces]
// A member may push its gradient of one clock in pieces (DDP-style buckets: each layer's
// gradient leaves as soon as backward has produced it, while the layers below are still
// computing). A piece names where it starts in the member's slice and its length. The
// core copies pieces into one buffer per member; when they cover the slice exactly once,
// the buffer is pushed as a whole gradient would be, so the update, the round, the
// version and the staleness are those of an unsplit push and a sync result is bitwise the
// same with or without pieces. Until then a piece is answered with the current version;
// a piece that is refused (a bad extent, an overlap, NaN, unreadable) refuses the whole
// gradient of that clock as a refused push would (the member's clock moves on; a sync
// round counts a submission that adds nothing), and every later piece of that clock is
// refused with the same code. A member that leaves or rejoins loses its open pieces.
//
// Note [Checkpoint steps]
// A checkpoint is named by a step S and holds the state once every live member has
// finished S iterations. In sync that is exactly the state when round S - 1 closes
// (version S), before any later gradient: a state the job passed through. In async and
// ssp it is the state right after the slowest live member's S-th push (faster members
// have pushed more, and the checkpoint keeps that; a resumed job repeats their steps
// after S). The steps are the multiples of checkpoint_every and of
// checkpoint_epoch_steps (every epoch's end), and the steps the coordinator asks for
// (--checkpoint-seconds: a step a little ahead of the fastest member, about every so many
// seconds; one asked for when it has passed already is not taken); when several pass at
// once (the slowest member left) only the latest is taken. The shell takes the image right after the call
// that made it due, before the next message, and writes it off the actor's thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/errc.hpp"
#include "core/job.hpp"
#include "core/key_table.hpp"
#include "core/lendable_tensor.hpp"
#include "core/messages.hpp"
#include "core/shard_checkpoint.hpp"
#include "core/update_rules.hpp"
#include "tensor/optimizer.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

struct shard_config {
  std::uint32_t index = 0;
  std::vector<shard_slice> stage_slices;  // per pipeline stage; empty: one stage, the whole buffer
  sync_mode mode = sync_mode::async;
  std::int32_t staleness = 0;  // ssp bound
  bool staleness_lr = false;
  // async/ssp: Note [Momentum of asynchrony], Note [Delay compensation] (core/update_rules.hpp).
  async_rule rule = async_rule::none;
  float dc_lambda = 0.04f;
  // sync: Note [Backup workers].
  std::int32_t backup_workers = 0;
  optimizer_config optimizer;
  lr_schedule schedule;  // indexed by the pushing worker's clock
  std::vector<key_range> ranges;  // of the model's flat vector, in buffer order (what a checkpoint says it holds)
  // Note [Checkpoint steps]: checkpoints every this many steps / at each epoch's end (0: not).
  std::int64_t checkpoint_every = 0;
  std::int64_t checkpoint_epoch_steps = 0;
};

inline constexpr int staleness_buckets = 8;  // 0, 1, 2, 3, 4, 5-8, 9-16, >16
int staleness_bucket(std::int64_t staleness);

struct shard_counters {
  std::int64_t updates = 0;    // optimizer steps applied
  std::int64_t gradients = 0;  // gradients accepted
  std::int64_t rejected = 0;   // gradients or pulls refused
  std::int64_t late = 0;       // gradients (or pieces) dropped: their round closed without them
  std::map<errc, std::int64_t> rejected_by;
  std::int64_t pulls = 0;       // pulls answered
  std::int64_t pulls_held = 0;  // of those, answered after being held
  std::int64_t staleness_sum = 0, staleness_count = 0, staleness_max = 0;
  std::array<std::int64_t, staleness_buckets> staleness_hist{};
};

// What the shell knows of how a gradient came (shard_core::push).
struct gradient_receipt {
  // Why the shell could not read the gradient (a bad shared-memory slot, a malformed
  // encoding); the push is then refused as malformed, with the clock and round
  // accounting of any refused gradient (the worker's clock moves on; a sync round
  // counts it as a submission that adds nothing). Empty: it could.
  std::string unreadable;
  // A piece of the member's gradient (Note [Gradient pieces]); piece_numel 0: the whole
  // slice. A piece that does not complete the gradient is answered with no error and
  // the current version.
  std::int64_t piece_offset = 0;
  std::int64_t piece_numel = 0;
  // The transport scanned it and found no NaN or Inf (Note [Scanned on arrival] in
  // core/lane.hpp), so the core does not scan it again.
  bool finite = false;
};

class shard_core {
 public:
  using token = std::uint64_t;

  shard_core(shard_config cfg, tensor params);

  // Sets the live members, all at `clock` (a resumed job's; in sync it must be the
  // version), with each one's pipeline stage (default 0). Members of a stage with no slice
  // here are left out. Until then pushes and pulls are refused.
  void start(const std::vector<std::uint32_t>& workers, const std::vector<std::uint32_t>& stages = {},
             std::int64_t clock = 0);

  // Before the start: the state of a checkpoint (for this shard's ranges), continued at
  // `clock`, the resumed members' clock (in sync the version becomes the clock, so rounds
  // go on counting from it). Why not, when it does not fit this shard.
  std::optional<std::string> restore(const shard_image& s, std::int64_t clock);
  // Note [Checkpoint steps]: the coordinator asks for a checkpoint at `step` as well.
  void request_checkpoint(std::int64_t step);
  // Note [Checkpoint steps]: the step whose checkpoint the last call made due, once.
  std::optional<std::int64_t> take_checkpoint_due() { return std::exchange(checkpoint_due_, std::nullopt); }
  // A copy of the state for checkpoint `step`.
  shard_image image(std::int64_t step) const;
  bool started() const { return started_; }

  struct push_outcome {
    std::optional<errc> error;
    std::string detail;
    std::int64_t version = 0;
    std::int64_t staleness = 0;
    bool late = false;  // Note [Backup workers]: dropped, no error; `version` is the open round
  };
  push_outcome push(std::uint32_t worker, std::int64_t clock, std::int64_t base_version, tensor grad,
                    const gradient_receipt& how = {});

  enum class pull_decision { answer, hold, reject };
  struct pull_outcome {
    pull_decision decision = pull_decision::answer;
    std::optional<errc> error;
    std::string detail;
  };
  pull_outcome pull(std::uint32_t worker, std::int64_t clock, token t);

  // A worker died or left: it no longer counts for rounds or bounds.
  void worker_left(std::uint32_t worker);
  // ssp: the coordinator names the member a straggler, or no longer (Note [Stragglers
  // outside the bound]). Ignored in other modes and for members this shard does not know.
  void set_straggler(std::uint32_t worker, bool slow);
  bool straggler(std::uint32_t worker) const;
  // A worker (re)joins a running job at `clock`: in sync it is expected from round `clock`
  // on (a round that has closed already moves it to the open one); in async/ssp it counts
  // as having finished `clock` iterations.
  void worker_joined(std::uint32_t worker, std::int64_t clock, std::uint32_t stage = 0);

  // The member's slice of `buffer` (the parameters, or any tensor laid out like them), packed.
  tensor pack_slice(std::uint32_t worker, const_tensor_view buffer) const;
  // The same, packed into `out` of slice_numel(worker) elements.
  void pack_slice_into(std::uint32_t worker, const_tensor_view buffer, tensor_view out) const;
  // Whether push() keeps the gradient beyond the call (sync, until its round closes); when
  // it does not, the gradient may be borrowed memory that is valid only during the call.
  // A piece is always copied.
  bool keeps_gradient(std::uint32_t worker, std::int64_t piece_numel) const {
    return cfg_.mode == sync_mode::sync && (piece_numel == 0 || piece_numel == slice_numel(worker));
  }
  std::int64_t slice_numel(std::uint32_t worker) const;

  // Held pulls that may be answered now / that never will be (their worker left).
  std::vector<token> take_released();
  std::vector<token> take_dropped();

  const tensor& params() const { return params_.get(); }
  // The member's slice of the parameters for a reply to carry: when the slice is the whole
  // buffer, shared without a copy (Note [Lent values] in core/lendable_tensor.hpp;
  // read-only, and may outlive this core), else packed.
  tensor params_for(std::uint32_t worker) const;
  // What is wrong with the piece [offset, offset + numel) of the member's slice (it must
  // lie in the slice and hold something), or "".
  std::string check_piece(std::uint32_t worker, std::int64_t offset, std::int64_t numel) const;
  // Those elements of the parameters' slice, packed (a layer-by-layer pull); the piece
  // must check.
  tensor piece_for(std::uint32_t worker, std::int64_t offset, std::int64_t numel) const;
  // The shell answered the member's pull of [offset, offset + numel) of its slice (numel
  // 0: all of it) with the parameters as they are now: with --async-rule dcasgd, what
  // its next gradient is compensated against (Note [Delay compensation]).
  void answered(std::uint32_t worker, std::int64_t offset = 0, std::int64_t numel = 0);
  std::int64_t version() const { return version_; }
  // The version a member's pulls carry and its staleness is measured in: the shard's, or
  // in async/ssp with several stages, the updates applied to the member's own slice
  // (another stage's update does not make its parameters stale).
  std::int64_t version_for(std::uint32_t worker) const;
  std::int64_t numel() const { return params_.get().numel(); }
  std::size_t held() const { return held_.size(); }
  std::size_t live_workers() const;
  const shard_counters& counters() const { return counters_; }
  const shard_config& config() const { return cfg_; }

 private:
  struct member {
    bool live = true;
    std::int64_t completed = 0;   // iterations finished (async/ssp)
    std::int64_t from_round = 0;  // sync: the first round that needs this worker
    std::uint32_t stage = 0;
    // Note [Stragglers outside the bound]: named by the coordinator, and left out of the
    // bound until it is no longer named and has caught up.
    bool named_straggler = false, outside_bound = false;
  };
  struct held_pull {
    token t;
    std::uint32_t worker;
    std::int64_t clock;
  };

  struct refusal {
    errc code;
    std::string detail;
  };
  // A gradient (or a piece) refused before it is looked at, or nothing.
  using verdict = std::optional<refusal>;
  std::optional<errc> check_sender(std::uint32_t worker, std::string& detail) const;
  // finite: known free of NaN and Inf, so not scanned.
  std::optional<errc> check_tensor(const_tensor_view grad, std::int64_t expected_numel, std::string& detail,
                                   bool finite) const;
  // Whether a gradient of `clock` from the member is due now.
  verdict check_clock(std::uint32_t worker, std::int64_t clock) const;
  // Whole gradients; `refused`: refuse it with this, as the clock's submission; `finite`:
  // known free of NaN and Inf.
  push_outcome push_sync(std::uint32_t worker, std::int64_t clock, std::int64_t base_version, tensor grad,
                         verdict refused, bool finite);
  push_outcome push_on_arrival(std::uint32_t worker, std::int64_t clock, std::int64_t base_version, tensor grad,
                               verdict refused, bool finite);
  push_outcome submit(std::uint32_t worker, std::int64_t clock, std::int64_t base_version, tensor grad,
                      verdict refused, bool finite);
  push_outcome push_piece(std::uint32_t worker, std::int64_t clock, std::int64_t base_version, tensor grad,
                          const gradient_receipt& how);
  push_outcome reject(errc e, std::string detail);
  // Note [Backup workers]: whether a gradient of `clock` comes after its round closed
  // without it, and the answer that drops it.
  bool late(std::int64_t clock) const;
  push_outcome drop_late();
  void maybe_complete_round();
  // sync: every live member due in the open round submitted (Note [Backup workers]: all
  // but backup_workers of each stage's, at least one).
  bool round_complete() const;
  bool can_answer(std::int64_t clock) const;
  std::int64_t slowest_completed() const;
  // ssp: the slowest of the members inside the bound (all of them, if none is).
  std::int64_t slowest_in_bound() const;
  void release_ready();
  void record_staleness(std::int64_t s);
  // Live members pushing to this stage's slice (Note [Momentum of asynchrony]).
  std::uint32_t pushers(std::uint32_t stage) const;
  // Note [Delay compensation]: the gradient compensated for what moved since the member's
  // last answered pull, or `grad` itself when there is nothing to compensate.
  const_tensor_view compensated(std::uint32_t worker, const tensor& grad);
  // Every live member has finished `reached` iterations (Note [Checkpoint steps]).
  void note_reached(std::int64_t reached);

  shard_config cfg_;
  lendable_tensor params_;
  optimizer_state opt_;
  std::int64_t version_ = 0;
  bool started_ = false;
  std::map<std::uint32_t, member> members_;
  // sync: the current round's submissions, by rank (ordered, so the sum is in rank order);
  // an empty tensor marks a rejected submission.
  std::map<std::uint32_t, tensor> round_;
  tensor sum_;
  std::vector<held_pull> held_;
  std::vector<token> released_, dropped_;
  shard_counters counters_;
  std::map<std::uint32_t, std::int64_t> stage_steps_;  // async/ssp: optimizer steps per slice (Adam)
  std::int64_t last_checkpoint_ = 0;
  std::optional<std::int64_t> checkpoint_due_;
  std::set<std::int64_t> requested_checkpoints_;
  // What every live member has finished: the version in sync, the slowest one's clock in
  // async and ssp.
  std::int64_t reached() const;
  // Note [Gradient pieces]: per member, the gradient being assembled, and the clock whose
  // gradient a refused piece refused (with why).
  struct partial_gradient {
    std::int64_t clock = 0, base_version = 0, covered = 0;
    tensor buffer;
    std::map<std::int64_t, std::int64_t> pieces;  // offset -> numel
  };
  std::map<std::uint32_t, partial_gradient> partial_;
  // Note [Delay compensation]: each member's slice as its pulls were answered, packed, and
  // the compensated gradient's buffer.
  std::map<std::uint32_t, tensor> pulled_;
  tensor compensated_;
  tensor packed_now_;  // a pipeline stage's slice of params, packed for compensation
  std::map<std::uint32_t, std::pair<std::int64_t, refusal>> voided_;

  const shard_slice& slice_of_stage(std::uint32_t stage) const;
  // The worker's slice is all of this shard's parameters, in their order.
  bool whole_shard(std::uint32_t worker) const;
  bool has_slice(std::uint32_t stage) const;
};

// The shard a welcome describes: its ranges of the model initialised from the job's seed
// (exactly as a local run would), the job's mode, optimizer and schedule, and each
// pipeline stage's slice. Fails when the job's model cannot be built.
expected<std::unique_ptr<shard_core>> shard_for(const shard_welcome& w);

}  // namespace troupe
