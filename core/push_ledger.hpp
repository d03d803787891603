// push_ledger: what a training member's pushes to the shards owe it (core/member_core.hpp),
// free of compute: the answers still due (the member finishes once none is), the
// gradients refused (each counted once per shard and clock, however many of its pieces
// were refused), the bytes pushed as encoded, the open round a late answer names and the
// samples of the rounds that closed without this member (Note [Backup workers] in
// core/shard_core_rules.cpp), and with 2-bit pushes each shard's residual: what the codes
// have not sent yet (Note [2-bit gradients] in tensor/grad_codec.hpp).
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "core/kv_messages.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

class push_ledger {
 public:
  push_ledger() = default;
  // residual_numel[s]: the elements of shard s's residual; 0 keeps none for it.
  explicit push_ledger(const std::vector<std::int64_t>& residual_numel);

  // One push went out, `bytes` as encoded: its answer is now due.
  void sent(std::size_t bytes);
  // The answer to a push of `clock`. A late one moves the open round to the version it
  // names; true when it is the first to drop that clock, whose samples the caller then
  // counts with dropped().
  bool answered(std::int64_t clock, const kv_push_ack& ack);
  // A refusal by shard s of the push of `clock` (its answer); true when it is the first of
  // that shard for that clock, to be warned about and counted as rejected.
  bool refused(std::uint32_t s, std::int64_t clock);
  // Samples of a dropped clock, reported once with take_dropped().
  void dropped(std::int64_t samples) { dropped_unreported_ += samples; }
  std::int64_t take_dropped();

  std::int64_t pending() const { return pending_; }
  std::int64_t rejected() const { return rejected_; }
  std::int64_t bytes() const { return bytes_; }
  // The round the shards are in: a member behind it skips to it (Note [Backup workers]).
  std::int64_t open_round() const { return open_round_; }
  // Shard s's residual (empty: none kept).
  tensor& residual(std::uint32_t s) { return residual_.at(s); }
  const tensor& residual(std::uint32_t s) const { return residual_.at(s); }

 private:
  std::int64_t pending_ = 0, rejected_ = 0, bytes_ = 0;
  std::int64_t open_round_ = 0;
  std::set<std::int64_t> dropped_clocks_;  // the newest 64
  std::int64_t dropped_unreported_ = 0;
  std::vector<std::int64_t> refused_clock_;  // per shard: the last clock it refused
  std::vector<tensor> residual_;             // per shard
};

}  // namespace troupe
