// shard_core: the members and their clocks, what a gradient must be to be taken, which
// update rule a push goes to, and held pulls (Note [Clocks, rounds and versions] in the
// header); the shard a welcome describes. The updates themselves are in
// shard_core_updates.cpp, gradient pieces in shard_core_pieces.cpp, the members' slices in
// shard_core_slices.cpp.
#include "core/shard_core.hpp"

#include <algorithm>
#include <limits>

#include "base/check.hpp"
#include "core/frame_bound.hpp"
#include "tensor/ops.hpp"

namespace troupe {

shard_core::shard_core(shard_config cfg, tensor params)
    : cfg_(std::move(cfg)), params_(std::move(params)), opt_(cfg_.optimizer, numel()) {
  TROUPE_CHECK(params_.get().type() == dtype::f32 && params_.get().rank() == 1,
               "shard parameters must be a flat f32 tensor");
  if (cfg_.stage_slices.empty()) cfg_.stage_slices.push_back({{0, numel()}});
  for (const auto& slice : cfg_.stage_slices)
    for (const auto& [off, len] : slice)
      TROUPE_CHECK(off >= 0 && len >= 0 && off + len <= numel(), "a slice reaches outside the shard");
}

void shard_core::start(const std::vector<std::uint32_t>& workers, const std::vector<std::uint32_t>& stages,
                       std::int64_t clock) {
  TROUPE_CHECK(cfg_.mode != sync_mode::sync || clock == version_, "a sync shard starts its members at its version");
  members_.clear();
  for (std::size_t i = 0; i < workers.size(); ++i) {
    member m;
    m.completed = clock;
    m.from_round = clock;
    m.stage = i < stages.size() ? stages[i] : 0;
    TROUPE_CHECK(m.stage < cfg_.stage_slices.size(), "a member of an unknown pipeline stage");
    if (!has_slice(m.stage)) continue;  // its stage keeps nothing here: it never pushes or pulls
    members_[workers[i]] = m;
  }
  started_ = true;
}

std::size_t shard_core::live_workers() const {
  return static_cast<std::size_t>(
      std::count_if(members_.begin(), members_.end(), [](auto& m) { return m.second.live; }));
}

std::optional<errc> shard_core::check_sender(std::uint32_t worker, std::string& detail) const {
  if (!started_) {
    detail = "shard " + std::to_string(cfg_.index) + " has not started yet";
    return errc::not_started;
  }
  auto it = members_.find(worker);
  if (it == members_.end() || !it->second.live) {
    detail = "worker " + std::to_string(worker) + " is not a live member of this job";
    return errc::not_member;
  }
  return std::nullopt;
}

std::optional<errc> shard_core::check_tensor(const_tensor_view grad, std::int64_t expected_numel, std::string& detail,
                                             bool finite) const {
  if (grad.empty() || grad.type() != dtype::f32) {
    detail = "gradient dtype " + std::string(grad.empty() ? "none" : name_of(grad.type())) + ", expected f32";
    return errc::bad_dtype;
  }
  if (grad.rank() != 1 || grad.numel() != expected_numel) {
    detail = "gradient of shape " + grad.sizes().str() + " where the sender's slice of shard " +
             std::to_string(cfg_.index) + " has " + std::to_string(expected_numel) + " floats";
    return errc::bad_shape;
  }
  if (grad.where().kind != device_kind::cpu) {
    detail = "gradient is not in host memory";
    return errc::bad_dtype;
  }
  if (!finite && !all_finite(grad)) {
    detail = "gradient holds NaN or infinite values";
    return errc::not_finite;
  }
  return std::nullopt;
}

shard_core::push_outcome shard_core::reject(errc e, std::string detail) {
  ++counters_.rejected;
  ++counters_.rejected_by[e];
  push_outcome out;
  out.error = e;
  out.detail = std::move(detail);
  out.version = version_;
  return out;
}

shard_core::push_outcome shard_core::push(std::uint32_t worker, std::int64_t clock, std::int64_t base_version,
                                          tensor grad, const gradient_receipt& how) {
  std::string detail;
  if (auto e = check_sender(worker, detail)) return reject(*e, std::move(detail));
  const std::int64_t n = slice_numel(worker);
  const bool whole =
      (how.piece_numel == 0 || (how.piece_offset == 0 && how.piece_numel == n)) && !partial_.count(worker);
  if (!whole) return push_piece(worker, clock, base_version, std::move(grad), how);
  verdict refused;
  if (!how.unreadable.empty()) refused = refusal{errc::malformed, how.unreadable};
  return submit(worker, clock, base_version, std::move(grad), std::move(refused), how.finite);
}

shard_core::push_outcome shard_core::submit(std::uint32_t worker, std::int64_t clock, std::int64_t base_version,
                                            tensor grad, verdict refused, bool finite) {
  return cfg_.mode == sync_mode::sync
             ? push_sync(worker, clock, base_version, std::move(grad), std::move(refused), finite)
             : push_on_arrival(worker, clock, base_version, std::move(grad), std::move(refused), finite);
}

shard_core::verdict shard_core::check_clock(std::uint32_t worker, std::int64_t clock) const {
  const member& m = members_.at(worker);
  const std::string w = std::to_string(worker), c = std::to_string(clock);
  if (cfg_.mode != sync_mode::sync) {
    if (clock < m.completed) return refusal{errc::duplicate, "worker " + w + " already pushed clock " + c};
    if (clock > m.completed)
      return refusal{errc::bad_clock,
                     "worker " + w + " pushed clock " + c + " but its next clock is " + std::to_string(m.completed)};
    return std::nullopt;
  }
  if (clock < version_)
    return refusal{errc::stale_round,
                   "gradient for round " + c + ", which closed already (now " + std::to_string(version_) + ")"};
  if (clock > version_)
    return refusal{errc::bad_clock,
                   "gradient for round " + c + " while round " + std::to_string(version_) + " is open"};
  if (round_.count(worker)) return refusal{errc::duplicate, "second gradient from worker " + w + " for round " + c};
  if (m.from_round > clock)
    return refusal{errc::bad_clock, "worker " + w + " rejoined for round " + std::to_string(m.from_round)};
  return std::nullopt;
}

std::int64_t shard_core::slowest_completed() const {
  std::int64_t slowest = std::numeric_limits<std::int64_t>::max();
  for (const auto& [rank, m] : members_)
    if (m.live) slowest = std::min(slowest, m.completed);
  return slowest;
}

bool shard_core::can_answer(std::int64_t clock) const {
  switch (cfg_.mode) {
    case sync_mode::sync:
    case sync_mode::allreduce:  // has no shards; refused by validate()
      return version_ >= clock;
    case sync_mode::async:
      return true;
    case sync_mode::ssp:
      return clock - cfg_.staleness <= slowest_in_bound();
  }
  return true;
}

shard_core::pull_outcome shard_core::pull(std::uint32_t worker, std::int64_t clock, token t) {
  pull_outcome out;
  if (auto e = check_sender(worker, out.detail)) {
    ++counters_.rejected;
    ++counters_.rejected_by[*e];
    out.decision = pull_decision::reject;
    out.error = e;
    return out;
  }
  if (can_answer(clock)) {
    ++counters_.pulls;
    out.decision = pull_decision::answer;
    return out;
  }
  held_.push_back({t, worker, clock});
  out.decision = pull_decision::hold;
  return out;
}

void shard_core::release_ready() {
  auto ready =
      std::stable_partition(held_.begin(), held_.end(), [&](const held_pull& h) { return !can_answer(h.clock); });
  for (auto it = ready; it != held_.end(); ++it) {
    released_.push_back(it->t);
    ++counters_.pulls;
    ++counters_.pulls_held;
  }
  held_.erase(ready, held_.end());
}

void shard_core::worker_left(std::uint32_t worker) {
  auto it = members_.find(worker);
  if (it == members_.end() || !it->second.live) return;
  it->second.live = false;
  partial_.erase(worker);
  pulled_.erase(worker);
  voided_.erase(worker);
  auto gone = std::stable_partition(held_.begin(), held_.end(), [&](const held_pull& h) { return h.worker != worker; });
  for (auto i = gone; i != held_.end(); ++i) dropped_.push_back(i->t);
  held_.erase(gone, held_.end());
  if (cfg_.mode == sync_mode::sync)
    maybe_complete_round();
  else if (live_workers() > 0)
    note_reached(slowest_completed());
  release_ready();
}

void shard_core::worker_joined(std::uint32_t worker, std::int64_t clock, std::uint32_t stage) {
  member m;
  m.stage = stage;
  m.completed = clock;
  m.from_round = std::max(clock, version_);
  members_[worker] = m;
  round_.erase(worker);
  partial_.erase(worker);
  pulled_.erase(worker);
  voided_.erase(worker);
  release_ready();
}

std::vector<shard_core::token> shard_core::take_released() { return std::exchange(released_, {}); }

std::vector<shard_core::token> shard_core::take_dropped() { return std::exchange(dropped_, {}); }

expected<std::unique_ptr<shard_core>> shard_for(const shard_welcome& w) {
  auto m = build_model(w.job);
  if (!m) return m.error();
  set_frame_bound(max_frame_bytes(w.job, *m));
  tensor full({m->num_params()});
  m->init_params(full, w.job.train.seed, w.job.train.init);
  std::int64_t numel = 0;
  for (const auto& r : w.ranges) numel += r.length;
  tensor mine({numel});
  pack_shard(mine, full, w.ranges);
  shard_config cfg;
  cfg.index = w.index;
  if (w.job.pipeline_stages > 1) cfg.stage_slices = shard_stage_slices(w.ranges, job_stage_spans(w.job, *m));
  cfg.mode = w.job.mode;
  cfg.staleness = w.job.staleness;
  cfg.staleness_lr = w.job.staleness_lr;
  cfg.rule = w.job.async_correction;
  cfg.dc_lambda = w.job.dc_lambda;
  cfg.backup_workers = w.job.backup_workers;
  cfg.optimizer = w.job.train.optimizer;
  cfg.schedule = job_schedule(w.job);
  cfg.ranges = w.ranges;
  if (!w.job.checkpoints.dir.empty()) {
    cfg.checkpoint_every = w.job.checkpoints.every;
    cfg.checkpoint_epoch_steps = steps_per_epoch(w.job);
  }
  return std::make_unique<shard_core>(cfg, std::move(mine));
}

}  // namespace troupe
