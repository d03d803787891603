// The logic of one parameter shard, for every kind of job, free of CAF so it can be tested
// step by step: it owns the parts of the parameters placed on it, their optimizer state
// and versions, validates every gradient, applies updates by the job's mode and rules, and
// decides which pulls are answered now and which are held. A training job's shard holds
// one part per pipeline stage (its slice of the model, Note [Slices] in
// core/shard_core_slices.cpp); a key-value job's the parts of the users' keys that the
// layout put here (core/kv_layout.hpp). The shard_server actor wraps it and turns held
// pulls into response promises.
//
// Note [Rounds per part]
// Every part keeps its own clock, as MXNet's KVStore server does per key. A part is pushed
// by the live members of its stage (a key-value part: by every live member). A member's
// n-th push of a part belongs to the part's round n, counting from the part's version when
// the member joined (a rejoining training member: from the clock it is given). A push
// either states its clock (a training member's step: it must be the member's next one) or
// is simply the member's next (a user's loop, which pushes keys in its own pattern).
//   sync:  round n closes when every live member of the part's stage has pushed it; the
//          gradients are summed in rank order (bitwise reproducible) and applied once, so
//          the version counts closed rounds. A pull is held until every round the member
//          pushed (or, stating its clock c, rounds up to c - 1) has closed. A user's loop
//          may push ahead (round n + 1 before n closes); a stated clock must be the open
//          round's.
//   async: each push is applied on arrival; pulls are never held.
//   ssp:   applied on arrival, but a member that has pushed a part c times (or states
//          clock c) has its pull held until every live member inside the bound (Note
//          [Stragglers outside the bound]) has pushed it at least c - staleness times.
// staleness of a gradient = the part's version at arrival - the version the member pulled.
// The sync update uses the sum, as MXNet's dist_sync does, not the mean: each worker's
// gradient moves the parameters by lr per worker batch in every mode, which for sync is
// the linear scaling rule (N workers of batch B act like one of batch N*B at N*lr).
// A refused gradient with a stated clock still counts as that clock's submission (it adds
// nothing), so one bad training member cannot stall a round and its clock moves on; a
// refused push of a user's loop leaves every part as it was, since the loop may push again.
// With the shards' optimizer (MXNet's update_on_kvstore, always in training jobs) an
// update is an optimizer step at lr = schedule.at(the stated clock, else the part's
// version). A key-value job without one stores what the workers update with
// themselves: sync the round's sum, async and ssp the latest gradient.
// A round in sync needs every live member, so a key that some member never pushes never
// closes its rounds: every worker pushes every key it pulls, as in MXNet's dist_sync.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/errc.hpp"
#include "core/checkpoint_steps.hpp"
#include "core/job.hpp"
#include "core/key_table.hpp"
#include "core/kv_checkpoint.hpp"
#include "core/kv_layout.hpp"
#include "core/lendable_tensor.hpp"
#include "core/member_momenta.hpp"
#include "core/shard_checkpoint.hpp"
#include "core/shard_counters.hpp"
#include "core/update_rules.hpp"
#include "tensor/optimizer.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

// The shards' optimizer as a key-value job's member sets it.
struct kv_optimizer {
  optimizer_config config;
  lr_schedule schedule;  // indexed by the part's version
};

struct shard_config {
  std::uint32_t index = 0;
  std::vector<shard_slice> stage_slices;  // training: per pipeline stage; empty: one stage, the whole buffer
  sync_mode mode = sync_mode::async;
  std::int32_t staleness = 0;  // ssp bound
  bool staleness_lr = false;
  // async/ssp: Notes [Momentum of asynchrony], [Delay compensation], [Momentum per member].
  async_rule rule = async_rule::none;
  float dc_lambda = 0.04f;
  // Key-value jobs: the lr stays what the user's program set. Where the momentum rule would
  // scale it (momentum below 0) only the momentum is corrected; under dana a push already
  // carries its share (troupe.torch divides it by the workers), so no 1 / N is applied.
  bool rule_keeps_lr = false;
  // sync: Note [Backup workers].
  std::int32_t backup_workers = 0;
  // The shards' optimizer; has_optimizer false (a key-value job whose members update
  // themselves): a part stores what the workers push.
  bool has_optimizer = true;
  optimizer_config optimizer;
  lr_schedule schedule;           // indexed by the pushing member's clock, else by the part's version
  std::vector<key_range> ranges;  // of the model's flat vector, in buffer order (what a checkpoint says it holds)
  // Note [Checkpoint steps]: checkpoints every this many steps / at each epoch's end (0: not).
  std::int64_t checkpoint_every = 0;
  std::int64_t checkpoint_epoch_steps = 0;
};

// What the shell knows of how a gradient came (shard_core::push).
struct gradient_receipt {
  // Why the shell could not read the gradient (a bad shared-memory slot, a malformed
  // encoding); the push is then refused as malformed, with the clock and round
  // accounting of any refused gradient (the worker's clock moves on; a sync round
  // counts it as a submission that adds nothing). Empty: it could.
  std::string unreadable;
  // A piece of the member's gradient (Note [Gradient pieces]); piece_numel 0: the whole
  // part. A piece that does not complete the gradient is answered with no error and
  // the current version.
  std::int64_t piece_offset = 0;
  std::int64_t piece_numel = 0;
  // The transport scanned it and found no NaN or Inf (Note [Scanned on arrival] in
  // transport/lane.hpp), so the core does not scan it again.
  bool finite = false;
};

class shard_core {
 public:
  using token = std::uint64_t;
  // How far ahead of its part's open round a sync member may push (a user's loop).
  static constexpr std::int64_t max_rounds_ahead = 64;

  // A training job's shard: its buffer (the ranges concatenated) cut into one part per
  // pipeline stage (Note [Slices]).
  shard_core(shard_config cfg, tensor params);
  // A key-value job's shard: its parts come with define().
  explicit shard_core(shard_config cfg);

  // Sets the live members, all at `clock` (a resumed job's; in sync it must be the
  // version; a key-value job's members start at each part's version), with each one's
  // pipeline stage (default 0). Members of a stage with no part here are left out. Until
  // then pushes and pulls are refused.
  void start(const std::vector<std::uint32_t>& members, const std::vector<std::uint32_t>& stages = {},
             std::int64_t clock = 0);
  bool started() const { return started_; }
  // The parts are a training job's stages (else a key-value job's keys).
  bool training() const { return training_; }
  // A member (re)joins a running job, expected from `clock` on (in sync a round that has
  // closed already moves it to the open one); without a clock, from each part's open
  // round (sync) or level with its slowest live member (async/ssp).
  void member_joined(std::uint32_t member, std::optional<std::int64_t> clock = std::nullopt, std::uint32_t stage = 0);
  // A member died or left: it no longer counts for rounds or bounds; its held pulls are dropped.
  void member_left(std::uint32_t member);
  // ssp: the coordinator names the member a straggler, or no longer (Note [Stragglers
  // outside the bound]). Ignored in other modes and for members this shard does not know.
  void set_straggler(std::uint32_t member, bool slow);
  bool straggler(std::uint32_t member) const;

  // A key-value job: creates part `id` of key `key_name` (for messages) with its initial
  // value (flat f32). Defining a part again with the same size keeps the first value (the
  // first init wins).
  std::optional<fault> define(kv_part_id id, const std::string& key_name, const_tensor_view initial);
  bool defined(kv_part_id id) const { return parts_.count(id) > 0; }
  // A key-value job: sets (or clears) the shards' optimizer. Only the learning rate's
  // schedule changed (as a worker's learning-rate scheduler does): every part keeps its
  // optimizer state (momentum, Adam's moments), as PyTorch does when a group's lr
  // changes. Anything else changed: the state of every part starts afresh.
  void set_optimizer(std::optional<kv_optimizer> opt);

  // Before the start: the state of a checkpoint (for this shard's ranges), continued at
  // `clock`, the resumed members' clock (in sync the version becomes the clock, so rounds
  // go on counting from it). Why not, when it does not fit this shard.
  std::optional<std::string> restore(const shard_image& s, std::int64_t clock);
  // Note [Checkpoint steps]: the coordinator asks for a checkpoint at `step` as well. A
  // key-value shard with no part that holds checkpoints back takes it at once (Note
  // [Key-value checkpoints]).
  void request_checkpoint(std::int64_t step);
  // Note [Checkpoint steps]: the step whose checkpoint the last call made due, once.
  std::optional<std::int64_t> take_checkpoint_due() { return std::exchange(checkpoint_due_, std::nullopt); }
  // A copy of the state for checkpoint `step`: a training job's shard's buffer, or a
  // key-value job's parts (Note [Key-value checkpoints] in core/kv_checkpoint.hpp).
  shard_image image(std::int64_t step) const;
  kv_shard_image parts_image(std::int64_t step) const;
  // A key-value job's shard, before the start: its parts, their optimizer state and
  // versions, and the shards' optimizer, as a checkpoint holds them. Why not.
  std::optional<std::string> restore_parts(const kv_shard_image& s);

  struct push_outcome {
    std::optional<fault> error;
    std::int64_t version = 0;    // the part's version after the push
    std::int64_t staleness = 0;  // updates applied to the part since the version the gradient was computed on
    bool late = false;           // Note [Backup workers]: dropped, no error; `version` is the open round
  };
  // A training member's gradient of `clock` for its stage's part (or a piece of it).
  push_outcome push(std::uint32_t member, std::int64_t clock, std::int64_t base_version, tensor grad,
                    const gradient_receipt& how = {});
  // A user's loop's next push of one part; grad may be borrowed memory valid only
  // during the call.
  push_outcome push_part(std::uint32_t member, kv_part_id part, std::int64_t base_version, const_tensor_view grad);
  // One message's pushes of several parts, all or none: every part is checked (membership,
  // shape, finiteness, rounds ahead; each part named once) before any is applied, so a
  // refused push leaves every part as it was. `finite`: the transport found every
  // gradient free of NaN and Inf (Note [Scanned on arrival] in transport/lane.hpp), so they are
  // not scanned again.
  struct push_outcome_all {
    std::optional<fault> error;
    std::vector<std::int64_t> versions, staleness;  // per part, when applied
  };
  push_outcome_all push_parts(std::uint32_t member, const std::vector<kv_part_id>& parts,
                              const std::vector<std::int64_t>& base_versions,
                              const std::vector<const_tensor_view>& grads, bool finite = false);

  enum class pull_decision { answer, hold, reject };
  struct pull_outcome {
    pull_decision decision = pull_decision::answer;
    std::optional<fault> error;
  };
  // A training member's pull of its stage's part at `clock`.
  pull_outcome pull(std::uint32_t member, std::int64_t clock, token t);
  // A user's loop's pull of one part, after the pushes it made of it.
  pull_outcome pull_part(std::uint32_t member, kv_part_id part, token t);
  // The shell will not answer the pull it holds under t (a later part of the same pull
  // was refused): the core forgets it, so it is neither released nor counted.
  void cancel_pull(token t);
  // Held pulls that may be answered now / that never will be (their member left).
  std::vector<token> take_released();
  std::vector<token> take_dropped();

  // The shell answered the member's pull of part (or [offset, offset + numel) of it; numel
  // 0: all of it) with the values as they are now: with --async-rule dcasgd, what its
  // next gradient is compensated against (Note [Delay compensation]).
  void answered(std::uint32_t member, std::int64_t offset = 0, std::int64_t numel = 0);
  void answered(std::uint32_t member, kv_part_id part);

  // --- A training job's view: each member's slice of the shard's buffer (Note [Slices]).
  // The whole buffer in its order: the part itself when there is one (shared, Note [Lent
  // values]: read-only, and may outlive this core), else assembled from the stages' parts.
  tensor params() const;
  // The member's slice of `buffer` (the parameters, or any tensor laid out like them), packed.
  tensor pack_slice(std::uint32_t member, const_tensor_view buffer) const;
  // The same, packed into `out` of slice_numel(member) elements.
  void pack_slice_into(std::uint32_t member, const_tensor_view buffer, tensor_view out) const;
  // Whether push() keeps the gradient beyond the call (sync, until its round closes); when
  // it does not, the gradient may be borrowed memory that is valid only during the call.
  // A piece is always copied.
  bool keeps_gradient(std::uint32_t member, std::int64_t piece_numel) const {
    return cfg_.mode == sync_mode::sync && (piece_numel == 0 || piece_numel == slice_numel(member));
  }
  std::int64_t slice_numel(std::uint32_t member) const;
  // The member's slice of the parameters for a reply to carry, shared without a copy
  // (Note [Lent values]).
  tensor params_for(std::uint32_t member) const;
  // What is wrong with the piece [offset, offset + numel) of the member's slice (it must
  // lie in the slice and hold something), or "".
  std::string check_piece(std::uint32_t member, std::int64_t offset, std::int64_t numel) const;
  // Those elements of the member's slice, copied (a layer-by-layer pull); the piece must check.
  tensor piece_for(std::uint32_t member, std::int64_t offset, std::int64_t numel) const;
  // The part a training member pushes and pulls: its stage's (stage_part).
  kv_part_id part_of(std::uint32_t member) const;
  // The version of the member's part: what its pulls carry and its staleness is measured in.
  std::int64_t version_for(std::uint32_t member) const;
  // A training job's version: in sync the rounds every part has closed, in async and ssp
  // the updates applied to every part.
  std::int64_t version() const;
  std::int64_t numel() const { return numel_; }

  // --- A key-value job's view: its parts.
  // A part's current value (flat) and version; the part must be defined.
  const_tensor_view value(kv_part_id part) const;
  // The same value as a tensor for a reply to carry (Note [Lent values] in
  // core/lendable_tensor.hpp): it shares the part's memory, must only be read, and may
  // outlive this core.
  tensor lend_value(kv_part_id part) const;
  std::int64_t version(kv_part_id part) const;
  // Rows of a part's value, in the order asked: (row_ids.size() * row_numel) floats into out.
  // Row ids are relative to the part; each must be in range (checked by the caller).
  void gather_rows(kv_part_id part, const std::vector<std::int64_t>& row_ids, std::int64_t row_numel,
                   tensor_view out) const;

  std::size_t held() const { return held_.size(); }
  std::size_t live_members() const;
  const shard_counters& counters() const { return counters_; }
  const shard_config& config() const { return cfg_; }

 private:
  struct member {
    bool live = true;
    std::uint32_t stage = 0;
    // Note [Stragglers outside the bound]: named by the coordinator, and left out of the
    // bound until it is no longer named and has caught up.
    bool named_straggler = false, outside_bound = false;
  };
  // What one member has pushed of one part.
  struct pusher {
    std::int64_t from_round = 0;  // the first round that needs it
    std::int64_t next = 0;        // its next push's round (async/ssp: pushes counted, its clock)
  };
  // Note [Gradient pieces]: a member's gradient of one clock being assembled.
  struct partial_gradient {
    std::int64_t clock = 0, base_version = 0, covered = 0;
    tensor buffer;
    std::map<std::int64_t, std::int64_t> pieces;  // offset -> numel
  };
  struct part_state {
    std::string key;          // a key-value part's canonical key name (for messages)
    std::uint32_t stage = 0;  // pushed by the members of this stage
    shard_slice slice;        // a training part: where it lies in the shard's buffer
    lendable_tensor value;
    std::optional<optimizer_state> opt;
    std::int64_t version = 0;  // updates applied (sync: rounds closed)
    std::map<std::uint32_t, pusher> pushers;
    // sync: open rounds by index, then by rank (ordered, so the sum is in rank order);
    // an empty tensor marks a refused submission.
    std::map<std::int64_t, std::map<std::uint32_t, tensor>> rounds;
    // Note [Delay compensation]: each member's copy of the part as its pulls were answered.
    std::map<std::uint32_t, tensor> pulled;
    member_momenta momenta;  // --async-rule dana (Note [Momentum per member])
    std::map<std::uint32_t, partial_gradient> partial;
    std::int64_t numel() const { return value.get().numel(); }
  };
  struct held_pull {
    token t;
    std::uint32_t member;
    kv_part_id part;
    std::int64_t needs;  // the member's clock (its pushes of the part) when it pulled
  };
  // Why a gradient is refused, before it is looked at.
  using verdict = std::optional<fault>;
  // The gradient a push hands to the rules: borrowed, or owned (then kept without a copy).
  struct gradient {
    const_tensor_view view;
    tensor* owned = nullptr;
  };

  part_state& new_part(kv_part_id id, tensor value, std::uint32_t stage);
  const part_state* find_part(std::uint32_t member) const;
  std::string part_label(const part_state& p, kv_part_id id) const;
  std::int64_t next_of(const part_state& p, std::uint32_t member) const;

  verdict check_sender(std::uint32_t member) const;
  verdict check_member_part(std::uint32_t member, kv_part_id part) const;
  verdict check_tensor(const part_state& p, kv_part_id id, const_tensor_view grad, std::int64_t expected_numel,
                       bool finite) const;
  // A stated clock that is not the member's next push of the part (or, in sync, the open round).
  verdict check_clock(const part_state& p, std::uint32_t member, std::int64_t clock) const;
  verdict check_ahead(const part_state& p, kv_part_id id, std::uint32_t member) const;
  push_outcome reject(const fault& f, std::int64_t version);

  // A training member's whole gradient of `clock` (owned); `refused`: refuse it with this,
  // as the clock's submission.
  push_outcome submit(std::uint32_t member, std::int64_t clock, std::int64_t base_version, tensor grad, verdict refused,
                      bool finite);
  push_outcome push_piece(std::uint32_t member, std::int64_t clock, std::int64_t base_version, tensor grad,
                          const gradient_receipt& how);
  // An accepted gradient of part p: into its round (sync) or applied (async/ssp).
  // clock: the member's stated one (schedule index in async), else none.
  push_outcome accept(part_state& p, std::uint32_t member, std::optional<std::int64_t> clock, std::int64_t base_version,
                      gradient g);
  void close_rounds(part_state& p);
  // sync: every live pusher due in round r submitted (Note [Backup workers]: all but
  // backup_workers of them, at least one).
  bool round_complete(const part_state& p, std::int64_t round) const;
  void apply(part_state& p, const_tensor_view grad, float lr, std::optional<float> momentum);
  void apply_on_arrival(part_state& p, std::uint32_t member, std::optional<std::int64_t> clock, const_tensor_view grad,
                        std::int64_t staleness);
  // Note [Backup workers]: whether a gradient of `round` comes after its round closed
  // without it, and the answer that drops it.
  bool late(const part_state& p, std::int64_t round) const;
  push_outcome drop_late(part_state& p, std::uint32_t member);

  bool can_answer(const part_state& p, std::int64_t needs) const;
  pull_outcome hold_or_answer(std::uint32_t member, kv_part_id part, std::int64_t needs, token t);
  std::int64_t slowest(const part_state& p) const;
  // ssp: the slowest of the part's pushers inside the bound (all of them, if none is).
  std::int64_t slowest_in_bound(const part_state& p) const;
  void release_ready();
  void record_staleness(std::int64_t s);
  // Live members pushing to this stage's parts (Note [Momentum of asynchrony]).
  std::uint32_t live_pushers(std::uint32_t stage) const;
  // Note [Delay compensation]: the gradient compensated for what moved since the member's
  // last answered pull, or `grad` itself when there is nothing to compensate.
  const_tensor_view compensated(part_state& p, std::uint32_t member, const_tensor_view grad);
  // Note [Stragglers outside the bound]: a member no longer named counts again once it
  // has caught up on every part it pushes.
  void maybe_back_in_bound(std::uint32_t member);

  // Note [Checkpoint steps]: what every live member has finished (the parts' rounds in
  // sync, the slowest pusher's pushes in async and ssp), and a checkpoint due at it.
  // The step every part that holds checkpoints back has reached; none when no part does
  // (a key-value shard whose keys nobody pushed, or that holds no key).
  std::optional<std::int64_t> reached_by_parts() const;
  std::int64_t reached() const { return reached_by_parts().value_or(0); }
  void note_reached();

  shard_config cfg_;
  bool started_ = false;
  bool training_ = false;  // the parts are a training job's stages
  std::int64_t numel_ = 0;
  std::map<std::uint32_t, member> members_;
  std::map<kv_part_id, part_state> parts_;
  std::vector<held_pull> held_;
  std::vector<token> released_, dropped_;
  shard_counters counters_;
  checkpoint_steps checkpoints_{cfg_.checkpoint_every, cfg_.checkpoint_epoch_steps};  // Note [Checkpoint steps]
  std::optional<std::int64_t> checkpoint_due_;
  // Note [Gradient pieces]: per member, the clock whose gradient a refused piece refused (with why).
  std::map<std::uint32_t, std::pair<std::int64_t, fault>> voided_;
  tensor compensated_;  // Note [Delay compensation]: the compensated gradient's buffer
};

}  // namespace troupe
