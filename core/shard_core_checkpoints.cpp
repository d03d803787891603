// shard_core's checkpoints (Note [Checkpoint steps] below): when one is due, the
// copy of the state it holds (a training shard's buffer, its optimizer's slots and step
// counts, assembled from the stages' parts), and the restore of a resumed job's state.
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
#include <algorithm>

#include "base/check.hpp"
#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

namespace {

// `buffer`'s elements at `slice` <- `packed` (what a part holds), or the reverse.
void unpack_slice(tensor_view buffer, const shard_slice& slice, const_tensor_view packed) {
  std::int64_t pos = 0;
  for (const auto& [off, len] : slice) {
    copy(buffer.flat(off, len), packed.flat(pos, len));
    pos += len;
  }
}

tensor pack(const_tensor_view buffer, const shard_slice& slice, std::int64_t numel) {
  tensor out = tensor::uninitialized({numel});
  std::int64_t pos = 0;
  for (const auto& [off, len] : slice) {
    copy(out.view().flat(pos, len), buffer.flat(off, len));
    pos += len;
  }
  return out;
}

}  // namespace

std::optional<std::string> shard_core::restore(const shard_image& s, std::int64_t clock) {
  TROUPE_CHECK(!started_, "shard_core::restore after the start");
  TROUPE_CHECK(training_, "restore: a key-value job's shard has no buffer image");
  if (held_numel(s.params) != numel_ || s.params.type() != dtype::f32)
    return "the checkpoint holds " + std::to_string(held_numel(s.params)) + " parameters for shard " +
           std::to_string(cfg_.index) + ", which holds " + std::to_string(numel_);
  const bool per_stage = parts_.size() > 1 || !s.stage_steps.empty();
  for (auto& [id, p] : parts_) {
    const std::int64_t n = p.numel();
    auto steps = s.stage_steps.find(p.stage);
    const std::int64_t part_steps = steps != s.stage_steps.end() ? steps->second : s.optimizer_steps;
    if (p.opt) {
      const tensor slot1 = s.slot1.empty() ? tensor() : pack(s.slot1, p.slice, n);
      const tensor slot2 = s.slot2.empty() ? tensor() : pack(s.slot2, p.slice, n);
      if (auto wrong = p.opt->restore(part_steps, slot1, slot2)) return *wrong;
      p.momenta.start_from_slot();
    }
    copy(p.value.for_update(), pack(s.params, p.slice, n));
    if (cfg_.mode == sync_mode::sync)
      p.version = clock;
    else
      p.version = per_stage && steps != s.stage_steps.end() ? steps->second : s.version;
  }
  checkpoints_.taken(clock);
  return std::nullopt;
}

shard_image shard_core::image(std::int64_t step) const {
  TROUPE_CHECK(training_, "image: a key-value job's shard has no buffer image");
  shard_image s;
  s.shard = cfg_.index;
  s.step = step;
  s.version = version();
  for (const auto& r : cfg_.ranges) s.ranges.emplace_back(r.offset, r.length);
  s.params = tensor({numel_});
  const bool adam = cfg_.optimizer.kind != optimizer_kind::sgd;
  s.slot1 = tensor({numel_});
  if (adam) s.slot2 = tensor({numel_});
  for (const auto& [id, p] : parts_) {
    unpack_slice(s.params, p.slice, p.value.get());
    if (!p.opt) continue;
    unpack_slice(s.slot1, p.slice, p.momenta.sum(*p.opt));
    if (adam) unpack_slice(s.slot2, p.slice, p.opt->slot(1));
    s.optimizer_steps = std::max(s.optimizer_steps, p.opt->steps());
    // Async and ssp with pipeline stages: each stage's part counts its own updates.
    if (parts_.size() > 1 && cfg_.mode != sync_mode::sync) s.stage_steps[p.stage] = p.opt->steps();
  }
  return s;
}

kv_shard_image shard_core::parts_image(std::int64_t step) const {
  TROUPE_CHECK(!training_, "parts_image: a training job's shard keeps a buffer image");
  kv_shard_image s;
  s.shard = cfg_.index;
  s.step = step;
  s.has_optimizer = cfg_.has_optimizer;
  s.optimizer = cfg_.optimizer;
  s.schedule = cfg_.schedule;
  for (const auto& [id, p] : parts_) {
    kv_part_image part{id, p.key, p.version, 0, p.value.get(), {}, {}};
    if (p.opt) {
      part.optimizer_steps = p.opt->steps();
      part.slot1 = p.momenta.sum(*p.opt);
      if (!p.opt->slot(1).empty()) part.slot2 = p.opt->slot(1);
    }
    s.parts.push_back(std::move(part));
  }
  return s;
}

std::optional<std::string> shard_core::restore_parts(const kv_shard_image& s) {
  TROUPE_CHECK(!started_ && !training_, "restore_parts: a key-value job's shard, before its start");
  set_optimizer(s.has_optimizer ? std::optional<kv_optimizer>(kv_optimizer{s.optimizer, s.schedule}) : std::nullopt);
  for (const auto& image : s.parts) {
    if (auto e = define(image.id, image.key, image.value)) return "part " + std::to_string(image.id) + ": " + e->detail;
    part_state& p = parts_.at(image.id);
    p.version = image.version;
    if (p.opt) {
      if (auto wrong = p.opt->restore(image.optimizer_steps, image.slot1, image.slot2))
        return "part " + std::to_string(image.id) + " of key " + kv_key_display(image.key) + ": " + *wrong;
      p.momenta.start_from_slot();
    }
  }
  checkpoints_.taken(s.step);
  return std::nullopt;
}

std::optional<std::int64_t> shard_core::reached_by_parts() const {
  std::int64_t r = 0;
  bool any = false;
  for (const auto& [id, p] : parts_) {
    if (live_pushers(p.stage) == 0) continue;
    // Note [Key-value checkpoints]: a key nobody has pushed does not hold checkpoints back.
    const bool pushed = p.version > 0 || std::any_of(p.pushers.begin(), p.pushers.end(),
                                                     [](const auto& q) { return q.second.next > q.second.from_round; });
    if (!training_ && !pushed) continue;
    const std::int64_t here = cfg_.mode == sync_mode::sync ? p.version : slowest(p);
    r = any ? std::min(r, here) : here;
    any = true;
  }
  if (!any) return std::nullopt;
  return r;
}

void shard_core::request_checkpoint(std::int64_t step) {
  if (step <= checkpoints_.last()) return;
  if (started_ && !training_ && !reached_by_parts()) {  // nothing here to wait for
    checkpoints_.taken(step);
    checkpoint_due_ = step;
    return;
  }
  if (!started_ || step > reached()) checkpoints_.request(step);
}

void shard_core::note_reached() {
  if (!checkpoints_.any()) return;
  if (auto due = checkpoints_.take_due(reached())) checkpoint_due_ = *due;
}

}  // namespace troupe
