// shard_core: applying gradients (Note [Clocks, rounds and versions] in the header): a sync
// round summed in member order and applied once when it closes, and a push applied on
// arrival in async and ssp with the staleness and --async-rule corrections; the staleness
// each one records.
#include <algorithm>
#include <map>
#include <optional>

#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

int staleness_bucket(std::int64_t s) {
  if (s <= 4) return static_cast<int>(std::max<std::int64_t>(s, 0));
  if (s <= 8) return 5;
  if (s <= 16) return 6;
  return 7;
}

void shard_core::record_staleness(std::int64_t s) {
  counters_.staleness_sum += s;
  ++counters_.staleness_count;
  counters_.staleness_max = std::max(counters_.staleness_max, s);
  ++counters_.staleness_hist[staleness_bucket(s)];
}

std::int64_t shard_core::version_for(std::uint32_t worker) const {
  if (cfg_.stage_slices.size() == 1 || cfg_.mode == sync_mode::sync) return version_;
  auto it = members_.find(worker);
  if (it == members_.end()) return version_;
  auto steps = stage_steps_.find(it->second.stage);
  return steps == stage_steps_.end() ? 0 : steps->second;
}

shard_core::push_outcome shard_core::push_sync(std::uint32_t worker, std::int64_t clock, std::int64_t base_version,
                                               tensor grad, verdict refused, bool finite) {
  if (late(clock)) return drop_late();
  if (auto late = check_clock(worker, clock)) return reject(late->code, std::move(late->detail));
  if (!refused) {
    std::string detail;
    if (auto e = check_tensor(grad, slice_numel(worker), detail, finite)) refused = refusal{*e, std::move(detail)};
  }
  if (refused) {
    round_.emplace(worker, tensor());  // counted as submitted, contributes nothing
    auto out = reject(refused->code, std::move(refused->detail));
    maybe_complete_round();
    return out;
  }
  const std::int64_t staleness = std::max<std::int64_t>(0, clock - base_version);
  record_staleness(staleness);
  ++counters_.gradients;
  round_.emplace(worker, std::move(grad));
  maybe_complete_round();
  return {std::nullopt, {}, version_, staleness};
}

void shard_core::maybe_complete_round() {
  if (!round_complete()) return;
  // Sum in member order (std::map iterates by key), so the result does not depend on
  // arrival order: per stage, the first contribution is copied and the rest added.
  std::int64_t contributions = 0;
  std::map<std::uint32_t, bool> stage_seen;
  for (const auto& [rank, g] : round_) {
    if (g.empty()) continue;
    if (contributions == 0) {
      if (sum_.empty()) sum_ = tensor::uninitialized({numel()});
      if (cfg_.stage_slices.size() > 1) sum_.fill_zero();  // parts no live stage covers get no gradient
    }
    const std::uint32_t stage = members_[rank].stage;
    const bool first = !stage_seen[stage];
    stage_seen[stage] = true;
    std::int64_t pos = 0;
    for (const auto& [off, len] : slice_of_stage(stage)) {
      if (first)
        copy(sum_.view().flat(off, len), g.view().flat(pos, len));
      else
        axpy(sum_.view().flat(off, len), 1.f, g.view().flat(pos, len));
      pos += len;
    }
    ++contributions;
  }
  if (contributions > 0) {
    opt_.step(params_.for_update(), sum_, cfg_.schedule.at(version_));  // Note [Lent values]
    ++counters_.updates;
  }
  round_.clear();
  ++version_;
  note_reached(version_);
  release_ready();
}

shard_core::push_outcome shard_core::push_on_arrival(std::uint32_t worker, std::int64_t clock,
                                                     std::int64_t base_version, tensor grad, verdict refused,
                                                     bool finite) {
  if (auto late = check_clock(worker, clock)) return reject(late->code, std::move(late->detail));
  member& m = members_[worker];
  m.completed = clock + 1;  // the worker moved on, whatever happens to this gradient
  // Note [Stragglers outside the bound]: caught up, it counts for the bound again.
  if (m.outside_bound && !m.named_straggler && m.completed >= slowest_in_bound()) m.outside_bound = false;
  // The image is taken after this call, with this gradient applied (Note [Checkpoint steps]).
  note_reached(slowest_completed());
  if (!refused) {
    std::string detail;
    if (auto e = check_tensor(grad, slice_numel(worker), detail, finite)) refused = refusal{*e, std::move(detail)};
  }
  if (refused) {
    auto out = reject(refused->code, std::move(refused->detail));
    release_ready();
    return out;
  }
  const std::int64_t staleness = std::max<std::int64_t>(0, version_for(worker) - base_version);
  float lr = cfg_.schedule.at(clock);
  if (cfg_.staleness_lr || m.outside_bound) lr /= static_cast<float>(std::max<std::int64_t>(1, staleness));
  std::optional<float> momentum;
  if (cfg_.rule != async_rule::none && cfg_.optimizer.kind == optimizer_kind::sgd) {
    const momentum_correction c = correct_for_asynchrony(cfg_.optimizer.momentum, pushers(m.stage));
    momentum = c.momentum;
    lr *= c.lr_scale;
  }
  const const_tensor_view g = compensated(worker, grad);
  const shard_slice& slice = slice_of_stage(m.stage);
  tensor& params = params_.for_update();  // Note [Lent values]
  if (slice.size() == 1 && slice[0].second == numel()) {
    opt_.step(params, g, lr, momentum);
  } else {
    const std::int64_t t = ++stage_steps_[m.stage];
    std::int64_t pos = 0;
    for (const auto& [off, len] : slice) {
      opt_.step_range(params.view().flat(off, len), g.flat(pos, len), off, lr, t, momentum);
      pos += len;
    }
  }
  ++version_;
  ++counters_.updates;
  ++counters_.gradients;
  record_staleness(staleness);
  release_ready();
  return {std::nullopt, {}, version_, staleness};
}

}  // namespace troupe
