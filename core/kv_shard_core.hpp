// The logic of one shard of a key-value job (the client library's jobs), free of CAF: it
// owns the parts of the users' keys that the layout put here (core/kv_layout.hpp), their
// optimizer state and versions, validates every gradient, applies updates by the job's
// mode, and decides which pulls are answered now and which are held.
//
// Note [Per-key rounds]
// The built-in trainer's shard (shard_core) counts one clock per member step over its
// whole buffer. A user's training loop pushes and pulls keys in its own pattern, so here
// every part keeps its own clock, as MXNet's KVStore server does per key:
//   a member's n-th push of a part belongs to the part's round n (counting from 0, or
//   from the part's version when the member joined a running job).
//   sync:  round n closes when every live member has pushed it; the gradients are summed
//          in rank order (bitwise reproducible) and applied once, so the version counts
//          closed rounds. A member may push ahead (round n + 1 before n closes); those
//          wait for their round. A pull is held until every push the member made of the
//          part has been applied (version >= its pushes).
//   async: each push is applied on arrival; pulls are never held.
//   ssp:   applied on arrival, but a member that has pushed a part c times has its pull
//          held until every live member has pushed it at least c - staleness times.
// With a server optimizer (MXNet's update_on_kvstore) an update is an optimizer step at
// lr = schedule.at(version). Without one the part stores what the workers update with
// themselves: sync stores the round's sum, async and ssp the latest gradient (MXNet's
// server does the same), and a pull returns that.
// A round in sync needs every live member, so a key that some member never pushes never
// closes its rounds: every worker pushes every key it pulls, as in MXNet's dist_sync.

#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/errc.hpp"
#include "core/job.hpp"
#include "core/kv_layout.hpp"
#include "core/lendable_tensor.hpp"
#include "tensor/optimizer.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

// The server-side optimizer of a key-value job (absent: workers update themselves).
struct kv_optimizer {
  optimizer_config config;
  lr_schedule schedule;  // indexed by the part's version
};

struct kv_shard_config {
  std::uint32_t index = 0;
  sync_mode mode = sync_mode::async;
  std::int32_t staleness = 2;  // ssp bound
  bool staleness_lr = false;   // async/ssp with an optimizer: lr / max(1, staleness)
  // async/ssp with a server SGD optimizer: Note [Momentum of asynchrony] in
  // core/update_rules.hpp, N the live members (every member pushes every key), on the
  // momentum only: where the rule would scale the lr (momentum below 0), the lr stays what
  // the user's program set. dcasgd's compensation needs a copy per member and part, which
  // key-value jobs do not keep: it applies the momentum rule only.
  async_rule rule = async_rule::none;
  std::optional<kv_optimizer> optimizer;
};

class kv_shard_core {
 public:
  using token = std::uint64_t;
  // How far ahead of its part's open round a sync member may push.
  static constexpr std::int64_t max_rounds_ahead = 64;

  explicit kv_shard_core(kv_shard_config cfg);

  // The live members, all at round 0 of every part. Until then pushes and pulls are refused.
  void start(const std::vector<std::uint32_t>& members);
  bool started() const { return started_; }
  // A member joins a running job: every existing part expects its pushes from the part's
  // open round (sync) or level with the slowest live member (async/ssp).
  void member_joined(std::uint32_t member);
  // A member died or left: it no longer counts for rounds or bounds; its held pulls are dropped.
  void member_left(std::uint32_t member);

  // Creates part `id` of key `key_name` (for messages) with its initial value (flat f32).
  // Defining a part again with the same size keeps the first value (the first init wins).
  std::optional<fault> define(kv_part_id id, const std::string& key_name, const_tensor_view initial);
  bool defined(kv_part_id id) const { return parts_.count(id) > 0; }

  // Sets (or clears) the server optimizer. Only the learning rate's schedule changed (as a
  // worker's learning-rate scheduler does): every part keeps its optimizer state (momentum,
  // Adam's moments), as PyTorch does when a group's lr changes. Anything else changed: the
  // state of every part starts afresh.
  void set_optimizer(std::optional<kv_optimizer> opt);

  struct push_outcome {
    std::optional<fault> error;
    std::int64_t version = 0;    // the part's version after the push
    std::int64_t staleness = 0;  // updates applied to the part since the version the gradient was computed on
  };
  // grad: the part's numel f32 values; it may be borrowed memory valid only during the call.
  push_outcome push(std::uint32_t member, kv_part_id part, std::int64_t base_version, const_tensor_view grad);
  // One message's pushes of several parts, all or none: every part is checked (membership,
  // shape, finiteness, rounds ahead; each part named once) before any is applied, so a
  // refused push leaves every part as it was. `finite`: the transport found every
  // gradient free of NaN and Inf (Note [Scanned on arrival] in core/lane.hpp), so they are
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
  pull_outcome pull(std::uint32_t member, kv_part_id part, token t);
  // Held pulls that may be answered now / that never will be (their member left).
  std::vector<token> take_released();
  std::vector<token> take_dropped();

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
  std::int64_t updates() const { return updates_; }
  const kv_shard_config& config() const { return cfg_; }

 private:
  struct part_state {
    std::string key;  // canonical name, for messages
    lendable_tensor value;
    std::optional<optimizer_state> opt;
    std::int64_t version = 0;
    std::map<std::uint32_t, std::int64_t> pushed;                    // per member
    std::map<std::int64_t, std::map<std::uint32_t, tensor>> rounds;  // sync: open rounds by index, by rank
  };
  struct held_pull {
    token t;
    std::uint32_t member;
    kv_part_id part;
    std::int64_t needs;  // the member's pushes of the part when it pulled
  };

  std::optional<fault> check(std::uint32_t member, kv_part_id part) const;
  // Why member's push of grad to part would be refused; nothing changes either way.
  // finite: known free of NaN and Inf, so not scanned.
  std::optional<fault> check_push(std::uint32_t member, kv_part_id part, const_tensor_view grad, bool finite) const;
  // Applies a push that check_push accepted (release_ready() is the caller's).
  push_outcome apply_push(std::uint32_t member, kv_part_id part, std::int64_t base_version, const_tensor_view grad);
  std::int64_t pushed(const part_state& p, std::uint32_t member) const;
  std::int64_t slowest(const part_state& p) const;
  bool can_answer(const part_state& p, std::int64_t needs) const;
  void apply(part_state& p, const_tensor_view grad, float lr);
  void close_rounds(part_state& p);
  void release_ready();

  kv_shard_config cfg_;
  bool started_ = false;
  std::map<std::uint32_t, bool> members_;  // rank -> live
  std::map<kv_part_id, part_state> parts_;
  std::vector<held_pull> held_;
  std::vector<token> released_, dropped_;
  std::int64_t updates_ = 0;
};

}  // namespace troupe
