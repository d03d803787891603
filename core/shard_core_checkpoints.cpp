// shard_core's checkpoints (Note [Checkpoint steps] in the header): when one is due, the
// copy of the state it holds, and the restore of a resumed job's state.
#include <algorithm>

#include "base/check.hpp"
#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

namespace {

tensor copy_of(const_tensor_view t) {
  if (t.empty()) return {};
  tensor out = tensor::uninitialized(t.sizes(), t.type());
  copy(out, t);
  return out;
}

}  // namespace

std::optional<std::string> shard_core::restore(const shard_image& s, std::int64_t clock) {
  TROUPE_CHECK(!started_, "shard_core::restore after the start");
  if (held_numel(s.params) != numel() || s.params.type() != dtype::f32)
    return "the checkpoint holds " + std::to_string(held_numel(s.params)) + " parameters for shard " +
           std::to_string(cfg_.index) + ", which holds " + std::to_string(numel());
  if (auto wrong = opt_.restore(s.optimizer_steps, s.slot1, s.slot2)) return *wrong;
  copy(params_.for_update(), s.params);
  version_ = cfg_.mode == sync_mode::sync ? clock : s.version;
  stage_steps_ = s.stage_steps;
  last_checkpoint_ = clock;
  return std::nullopt;
}

shard_image shard_core::image(std::int64_t step) const {
  shard_image s;
  s.shard = cfg_.index;
  s.step = step;
  s.version = version_;
  for (const auto& r : cfg_.ranges) s.ranges.emplace_back(r.offset, r.length);
  s.params = copy_of(params());
  s.slot1 = copy_of(opt_.slot(0));
  s.slot2 = copy_of(opt_.slot(1));
  s.optimizer_steps = opt_.steps();
  s.stage_steps = stage_steps_;
  return s;
}

std::int64_t shard_core::reached() const {
  if (cfg_.mode == sync_mode::sync) return version_;
  return live_workers() > 0 ? slowest_completed() : 0;
}

void shard_core::request_checkpoint(std::int64_t step) {
  if (step > last_checkpoint_ && (!started_ || step > reached())) requested_checkpoints_.insert(step);
}

void shard_core::note_reached(std::int64_t reached) {
  std::int64_t due = 0;
  for (std::int64_t every : {cfg_.checkpoint_every, cfg_.checkpoint_epoch_steps})
    if (every > 0) due = std::max(due, reached / every * every);
  while (!requested_checkpoints_.empty() && *requested_checkpoints_.begin() <= reached) {
    due = std::max(due, *requested_checkpoints_.begin());
    requested_checkpoints_.erase(requested_checkpoints_.begin());
  }
  if (due <= last_checkpoint_) return;
  last_checkpoint_ = due;
  checkpoint_due_ = due;
}

}  // namespace troupe
