// shard_core: validation, the three update rules, and held pulls (see Note [Clocks,
// rounds and versions] in the header).
#include "core/shard_core.hpp"

#include <algorithm>
#include <limits>

#include "base/check.hpp"
#include "core/frame_bound.hpp"
#include "tensor/ops.hpp"

namespace troupe {

int staleness_bucket(std::int64_t s) {
  if (s <= 4) return static_cast<int>(std::max<std::int64_t>(s, 0));
  if (s <= 8) return 5;
  if (s <= 16) return 6;
  return 7;
}

shard_core::shard_core(shard_config cfg, tensor params)
    : cfg_(std::move(cfg)), params_(std::move(params)), opt_(cfg_.optimizer, numel()) {
  TROUPE_CHECK(params_.get().type() == dtype::f32 && params_.get().rank() == 1,
               "shard parameters must be a flat f32 tensor");
  if (cfg_.stage_slices.empty()) cfg_.stage_slices.push_back({{0, numel()}});
  for (const auto& slice : cfg_.stage_slices)
    for (const auto& [off, len] : slice)
      TROUPE_CHECK(off >= 0 && len >= 0 && off + len <= numel(), "a slice reaches outside the shard");
}

const shard_slice& shard_core::slice_of_stage(std::uint32_t stage) const {
  TROUPE_CHECK(stage < cfg_.stage_slices.size(), "no slice for this stage");
  return cfg_.stage_slices[stage];
}

std::int64_t shard_core::version_for(std::uint32_t worker) const {
  if (cfg_.stage_slices.size() == 1 || cfg_.mode == sync_mode::sync) return version_;
  auto it = members_.find(worker);
  if (it == members_.end()) return version_;
  auto steps = stage_steps_.find(it->second.stage);
  return steps == stage_steps_.end() ? 0 : steps->second;
}

bool shard_core::has_slice(std::uint32_t stage) const {
  for (const auto& r : slice_of_stage(stage))
    if (r.second > 0) return true;
  return false;
}

std::int64_t shard_core::slice_numel(std::uint32_t worker) const {
  auto it = members_.find(worker);
  const std::uint32_t stage = it == members_.end() ? 0 : it->second.stage;
  std::int64_t n = 0;
  for (const auto& r : slice_of_stage(stage)) n += r.second;
  return n;
}

tensor shard_core::pack_slice(std::uint32_t worker, const_tensor_view buffer) const {
  tensor out = tensor::uninitialized({slice_numel(worker)});
  pack_slice_into(worker, buffer, out);
  return out;
}

bool shard_core::whole_shard(std::uint32_t worker) const {
  auto it = members_.find(worker);
  const shard_slice& slice = slice_of_stage(it == members_.end() ? 0 : it->second.stage);
  return slice.size() == 1 && slice[0].first == 0 && slice[0].second == numel();
}

tensor shard_core::params_for(std::uint32_t worker) const {
  if (whole_shard(worker)) return params_.lend();
  return pack_slice(worker, params());
}

std::string shard_core::check_piece(std::uint32_t worker, std::int64_t offset, std::int64_t numel) const {
  const std::int64_t n = slice_numel(worker);
  if (offset >= 0 && numel > 0 && offset <= n && numel <= n - offset) return {};
  return "the piece [" + std::to_string(offset) + ", +" + std::to_string(numel) +
         ") does not lie in the sender's slice of " + std::to_string(n) + " floats of shard " +
         std::to_string(cfg_.index);
}

tensor shard_core::piece_for(std::uint32_t worker, std::int64_t offset, std::int64_t numel) const {
  TROUPE_CHECK(check_piece(worker, offset, numel).empty(), "piece_for: " + check_piece(worker, offset, numel));
  auto it = members_.find(worker);
  const shard_slice& slice = slice_of_stage(it == members_.end() ? 0 : it->second.stage);
  tensor out = tensor::uninitialized({numel});
  std::int64_t pos = 0, written = 0;
  for (const auto& [off, len] : slice) {
    const std::int64_t a = std::max(offset, pos), b = std::min(offset + numel, pos + len);
    if (a < b) {
      copy(out.view().flat(written, b - a), params().view().flat(off + (a - pos), b - a));
      written += b - a;
    }
    pos += len;
  }
  return out;
}

void shard_core::pack_slice_into(std::uint32_t worker, const_tensor_view buffer, tensor_view out) const {
  auto it = members_.find(worker);
  const std::uint32_t stage = it == members_.end() ? 0 : it->second.stage;
  const shard_slice& slice = slice_of_stage(stage);
  TROUPE_CHECK(out.numel() == slice_numel(worker), "pack_slice_into: the output holds " + std::to_string(out.numel()) +
                                                       " elements, the slice " + std::to_string(slice_numel(worker)));
  std::int64_t pos = 0;
  for (const auto& [off, len] : slice) {
    copy(out.flat(pos, len), buffer.flat(off, len));
    pos += len;
  }
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

std::optional<errc> shard_core::check_tensor(const_tensor_view grad, std::int64_t expected_numel,
                                             std::string& detail, bool finite) const {
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

void shard_core::record_staleness(std::int64_t s) {
  counters_.staleness_sum += s;
  ++counters_.staleness_count;
  counters_.staleness_max = std::max(counters_.staleness_max, s);
  ++counters_.staleness_hist[staleness_bucket(s)];
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
      return refusal{errc::bad_clock, "worker " + w + " pushed clock " + c + " but its next clock is " +
                                          std::to_string(m.completed)};
    return std::nullopt;
  }
  if (clock < version_)
    return refusal{errc::stale_round,
                   "gradient for round " + c + ", which closed already (now " + std::to_string(version_) + ")"};
  if (clock > version_)
    return refusal{errc::bad_clock, "gradient for round " + c + " while round " + std::to_string(version_) + " is open"};
  if (round_.count(worker)) return refusal{errc::duplicate, "second gradient from worker " + w + " for round " + c};
  if (m.from_round > clock)
    return refusal{errc::bad_clock, "worker " + w + " rejoined for round " + std::to_string(m.from_round)};
  return std::nullopt;
}

shard_core::push_outcome shard_core::push_piece(std::uint32_t worker, std::int64_t clock, std::int64_t base_version,
                                                tensor grad, const gradient_receipt& how) {
  const std::int64_t n = slice_numel(worker);
  const std::int64_t offset = how.piece_offset;
  const std::int64_t numel = how.piece_numel == 0 ? n : how.piece_numel;
  const std::string what = "the piece [" + std::to_string(offset) + ", +" + std::to_string(numel) + ") of worker " +
                           std::to_string(worker) + "'s clock-" + std::to_string(clock) + " gradient";
  if (auto v = voided_.find(worker); v != voided_.end() && v->second.first == clock)
    return reject(v->second.second.code, what + ": an earlier piece was refused (" + v->second.second.detail + ")");
  if (late(clock)) {
    partial_.erase(worker);
    return drop_late();
  }
  if (auto late = check_clock(worker, clock)) return reject(late->code, std::move(late->detail));
  partial_gradient& p = partial_[worker];
  if (p.buffer.empty() || p.clock != clock) {
    p = partial_gradient{clock, base_version, 0, tensor::uninitialized({n}), {}};
  }
  // Refuses the clock's whole gradient (Note [Gradient pieces]).
  const auto refuse = [&](errc e, const std::string& why) {
    partial_.erase(worker);
    voided_[worker] = {clock, refusal{e, what + ": " + why}};
    return submit(worker, clock, base_version, tensor(), refusal{e, what + ": " + why}, false);
  };
  if (!how.unreadable.empty()) return refuse(errc::malformed, how.unreadable);
  if (offset < 0 || numel < 0 || offset > n || numel > n - offset)
    return refuse(errc::bad_shape, "it reaches outside the sender's slice of " + std::to_string(n) + " floats");
  std::string detail;
  if (auto e = check_tensor(grad, numel, detail, how.finite)) return refuse(*e, detail);
  auto next = p.pieces.lower_bound(offset);
  const bool overlaps_next = next != p.pieces.end() && next->first < offset + numel;
  const bool overlaps_prev = next != p.pieces.begin() && std::prev(next)->first + std::prev(next)->second > offset;
  if (overlaps_next || overlaps_prev) return refuse(errc::duplicate, "it overlaps a piece already pushed");
  copy(p.buffer.view().flat(offset, numel), grad.view());
  p.pieces.emplace(offset, numel);
  p.covered += numel;
  if (p.covered < n) {
    push_outcome pending;
    pending.version = version_for(worker);
    pending.staleness = std::max<std::int64_t>(0, pending.version - p.base_version);
    return pending;
  }
  tensor full = std::move(p.buffer);
  const std::int64_t base = p.base_version;
  partial_.erase(worker);
  return submit(worker, clock, base, std::move(full), std::nullopt, true);  // every piece was checked
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
