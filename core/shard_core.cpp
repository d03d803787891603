// shard_core: the members, the parts (a training job's stages, a key-value job's key
// parts), what a push or pull must be to be taken, and held pulls (Note [Rounds per part]
// in the header); the shard a welcome describes. The updates themselves are in
// shard_core_updates.cpp, the async rules, backup workers and stragglers in
// shard_core_rules.cpp, gradient pieces in shard_core_pieces.cpp, a training member's
// slice in shard_core_slices.cpp, checkpoints in shard_core_checkpoints.cpp.
#include "core/shard_core.hpp"

#include <algorithm>
#include <limits>

#include "base/check.hpp"
#include "tensor/ops.hpp"

namespace troupe {

shard_core::shard_core(shard_config cfg) : cfg_(std::move(cfg)) {}

shard_core::shard_core(shard_config cfg, tensor params) : cfg_(std::move(cfg)), training_(true) {
  TROUPE_CHECK(params.type() == dtype::f32 && params.rank() == 1, "shard parameters must be a flat f32 tensor");
  numel_ = params.numel();
  if (cfg_.stage_slices.empty()) cfg_.stage_slices.push_back({{0, numel_}});
  for (std::uint32_t k = 0; k < cfg_.stage_slices.size(); ++k) {
    const shard_slice& slice = cfg_.stage_slices[k];
    std::int64_t n = 0;
    for (const auto& [off, len] : slice) {
      TROUPE_CHECK(off >= 0 && len >= 0 && off + len <= numel_, "a slice reaches outside the shard");
      n += len;
    }
    if (n == 0) continue;  // this stage keeps nothing here
    const bool whole = cfg_.stage_slices.size() == 1 && slice.size() == 1 && slice[0].first == 0 && n == numel_;
    tensor value;
    if (whole) {
      value = std::move(params);
    } else {
      value = tensor::uninitialized({n});
      std::int64_t pos = 0;
      for (const auto& [off, len] : slice) {
        copy(value.view().flat(pos, len), params.view().flat(off, len));
        pos += len;
      }
    }
    new_part(stage_part(k), std::move(value), k).slice = slice;
  }
}

shard_core::part_state& shard_core::new_part(kv_part_id id, tensor value, std::uint32_t stage) {
  part_state p;
  p.stage = stage;
  const std::int64_t n = value.numel();
  p.value = lendable_tensor(std::move(value));
  if (cfg_.has_optimizer) p.opt.emplace(cfg_.optimizer, n);
  return parts_.emplace(id, std::move(p)).first->second;
}

void shard_core::start(const std::vector<std::uint32_t>& members, const std::vector<std::uint32_t>& stages,
                       std::int64_t clock) {
  for (const auto& [id, p] : parts_)
    TROUPE_CHECK(!training_ || cfg_.mode != sync_mode::sync || clock == p.version,
                 "a sync shard starts its members at its version");
  members_.clear();
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::uint32_t stage = i < stages.size() ? stages[i] : 0;
    if (training_) {
      TROUPE_CHECK(stage < cfg_.stage_slices.size(), "a member of an unknown pipeline stage");
      if (!parts_.count(stage_part(stage))) continue;  // its stage keeps nothing here: it never pushes or pulls
    }
    members_[members[i]] = member{true, stage};
    for (auto& [id, p] : parts_) {
      const std::int64_t at = training_ ? clock : p.version;  // a restored key part goes on from its rounds
      if (p.stage == stage) p.pushers[members[i]] = pusher{at, at};
    }
  }
  started_ = true;
}

std::size_t shard_core::live_members() const {
  return static_cast<std::size_t>(
      std::count_if(members_.begin(), members_.end(), [](auto& m) { return m.second.live; }));
}

std::uint32_t shard_core::live_pushers(std::uint32_t stage) const {
  std::uint32_t n = 0;
  for (const auto& [rank, m] : members_) n += m.live && m.stage == stage;
  return n;
}

void shard_core::member_joined(std::uint32_t member, std::optional<std::int64_t> clock, std::uint32_t stage) {
  members_[member] = shard_core::member{false, stage};  // not counted while its place is worked out
  for (auto& [id, p] : parts_) {
    if (p.stage != stage) continue;
    std::int64_t at = 0;
    if (cfg_.mode == sync_mode::sync)
      at = std::max(clock.value_or(0), p.version);
    else if (clock)
      at = *clock;
    else if (const std::int64_t s = slowest(p); s != std::numeric_limits<std::int64_t>::max())
      at = s;  // level with the slowest live member
    p.pushers[member] = pusher{at, at};
    for (auto& [round, subs] : p.rounds) subs.erase(member);
    p.partial.erase(member);
    p.pulled.erase(member);
    p.momenta.forget(member);
  }
  members_[member].live = true;
  voided_.erase(member);
  release_ready();
}

void shard_core::member_left(std::uint32_t member) {
  auto it = members_.find(member);
  if (it == members_.end() || !it->second.live) return;
  it->second.live = false;
  voided_.erase(member);
  for (auto& [id, p] : parts_) {
    p.partial.erase(member);
    p.pulled.erase(member);
    p.momenta.forget(member);
  }
  auto gone = std::stable_partition(held_.begin(), held_.end(), [&](const held_pull& h) { return h.member != member; });
  for (auto i = gone; i != held_.end(); ++i) dropped_.push_back(i->t);
  held_.erase(gone, held_.end());
  if (cfg_.mode == sync_mode::sync)
    for (auto& [id, p] : parts_) close_rounds(p);
  note_reached();
  release_ready();
}

std::string shard_core::part_label(const part_state& p, kv_part_id id) const {
  if (training_) return "shard " + std::to_string(cfg_.index);
  return "key " + kv_key_display(p.key) + " (part " + std::to_string(id & 0xFFFF) + ")";
}

std::optional<fault> shard_core::define(kv_part_id id, const std::string& key_name, const_tensor_view initial) {
  TROUPE_CHECK(!training_, "a training job's shard holds its stages' parts only");
  part_state probe;
  probe.key = key_name;
  if (initial.empty() || initial.type() != dtype::f32 || !initial.is_contiguous())
    return fault{errc::bad_dtype, part_label(probe, id) + ": an initial value must be contiguous float32"};
  if (auto it = parts_.find(id); it != parts_.end()) {
    if (it->second.numel() != initial.numel())
      return fault{errc::bad_shape, part_label(probe, id) + " holds " + std::to_string(it->second.numel()) +
                                        " elements, not " + std::to_string(initial.numel())};
    return std::nullopt;  // the first init wins
  }
  if (!all_finite(initial))
    return fault{errc::not_finite, part_label(probe, id) + ": the initial value holds NaN or infinite values"};
  tensor value = tensor::uninitialized({initial.numel()});
  copy(value, initial.reshape({initial.numel()}));
  new_part(id, std::move(value), 0).key = key_name;
  numel_ += initial.numel();
  return std::nullopt;
}

void shard_core::set_optimizer(std::optional<kv_optimizer> opt) {
  const bool same_rule = opt && cfg_.has_optimizer && opt->config == cfg_.optimizer;
  cfg_.has_optimizer = opt.has_value();
  if (opt) {
    cfg_.optimizer = opt->config;
    cfg_.schedule = opt->schedule;
  }
  if (same_rule) return;
  for (auto& [id, p] : parts_) {
    p.opt.reset();
    p.momenta.clear();
    if (cfg_.has_optimizer) p.opt.emplace(cfg_.optimizer, p.numel());
  }
}

kv_part_id shard_core::part_of(std::uint32_t member) const {
  auto it = members_.find(member);
  return stage_part(it == members_.end() ? 0 : it->second.stage);
}

const shard_core::part_state* shard_core::find_part(std::uint32_t member) const {
  auto it = parts_.find(part_of(member));
  return it == parts_.end() ? nullptr : &it->second;
}

std::int64_t shard_core::next_of(const part_state& p, std::uint32_t member) const {
  auto it = p.pushers.find(member);
  return it == p.pushers.end() ? 0 : it->second.next;
}

shard_core::verdict shard_core::check_sender(std::uint32_t member) const {
  if (!started_) return fault{errc::not_started, "shard " + std::to_string(cfg_.index) + " has not started yet"};
  auto it = members_.find(member);
  if (it == members_.end() || !it->second.live)
    return fault{errc::not_member, "worker " + std::to_string(member) + " is not a live member of this job"};
  return std::nullopt;
}

shard_core::verdict shard_core::check_member_part(std::uint32_t member, kv_part_id part) const {
  if (auto e = check_sender(member)) return e;
  auto it = parts_.find(part);
  if (it == parts_.end() || it->second.stage != members_.at(member).stage)
    return fault{errc::bad_shard, "part " + std::to_string(part & 0xFFFF) + " of key id " + std::to_string(part >> 16) +
                                      " is not initialised on shard " + std::to_string(cfg_.index)};
  return std::nullopt;
}

shard_core::verdict shard_core::check_tensor(const part_state& p, kv_part_id id, const_tensor_view grad,
                                             std::int64_t expected_numel, bool finite) const {
  if (grad.empty() || grad.type() != dtype::f32)
    return fault{errc::bad_dtype, part_label(p, id) + ": gradient dtype " +
                                      std::string(grad.empty() ? "none" : name_of(grad.type())) + ", expected f32"};
  if ((training_ && grad.rank() != 1) || grad.numel() != expected_numel || !grad.is_contiguous())
    return fault{errc::bad_shape, part_label(p, id) + ": a gradient of shape " + grad.sizes().str() + " where " +
                                      (training_ ? "the sender's slice" : std::string("the part")) + " holds " +
                                      std::to_string(expected_numel) + " floats"};
  if (grad.where().kind != device_kind::cpu)
    return fault{errc::bad_dtype, part_label(p, id) + ": the gradient is not in host memory"};
  if (!finite && !all_finite(grad))
    return fault{errc::not_finite, part_label(p, id) + ": the gradient holds NaN or infinite values"};
  return std::nullopt;
}

shard_core::push_outcome shard_core::reject(const fault& f, std::int64_t version) {
  ++counters_.rejected;
  ++counters_.rejected_by[f.code];
  push_outcome out;
  out.error = f;
  out.version = version;
  return out;
}

// --- Pulls.

bool shard_core::can_answer(const part_state& p, std::int64_t needs) const {
  switch (cfg_.mode) {
    case sync_mode::sync:
    case sync_mode::allreduce:  // has no shards; refused by validate()
      return p.version >= needs;
    case sync_mode::async:
      return true;
    case sync_mode::ssp:
      return needs - cfg_.staleness <= slowest_in_bound(p);
  }
  return true;
}

shard_core::pull_outcome shard_core::hold_or_answer(std::uint32_t member, kv_part_id part, std::int64_t needs,
                                                    token t) {
  pull_outcome out;
  if (can_answer(parts_.at(part), needs)) {
    ++counters_.pulls;
    return out;
  }
  held_.push_back({t, member, part, needs});
  out.decision = pull_decision::hold;
  return out;
}

shard_core::pull_outcome shard_core::pull(std::uint32_t member, std::int64_t clock, token t) {
  verdict e = check_sender(member);
  if (!e && !find_part(member)) e = fault{errc::not_member, "worker " + std::to_string(member) + " has no part here"};
  if (e) {
    ++counters_.rejected;
    ++counters_.rejected_by[e->code];
    return {pull_decision::reject, e};
  }
  return hold_or_answer(member, part_of(member), clock, t);
}

shard_core::pull_outcome shard_core::pull_part(std::uint32_t member, kv_part_id part, token t) {
  if (auto e = check_member_part(member, part)) {
    ++counters_.rejected;
    ++counters_.rejected_by[e->code];
    return {pull_decision::reject, e};
  }
  return hold_or_answer(member, part, next_of(parts_.at(part), member), t);
}

void shard_core::release_ready() {
  auto ready = std::stable_partition(held_.begin(), held_.end(),
                                     [&](const held_pull& h) { return !can_answer(parts_.at(h.part), h.needs); });
  for (auto it = ready; it != held_.end(); ++it) {
    released_.push_back(it->t);
    ++counters_.pulls;
    ++counters_.pulls_held;
  }
  held_.erase(ready, held_.end());
}

void shard_core::cancel_pull(token t) {
  std::erase_if(held_, [t](const held_pull& h) { return h.t == t; });
}

std::vector<shard_core::token> shard_core::take_released() { return std::exchange(released_, {}); }
std::vector<shard_core::token> shard_core::take_dropped() { return std::exchange(dropped_, {}); }

std::int64_t shard_core::slowest(const part_state& p) const {
  std::int64_t s = std::numeric_limits<std::int64_t>::max();
  for (const auto& [rank, m] : members_)
    if (m.live && m.stage == p.stage) s = std::min(s, next_of(p, rank));
  return s;
}

// --- A key-value job's parts.

const_tensor_view shard_core::value(kv_part_id part) const { return parts_.at(part).value.get().view(); }
tensor shard_core::lend_value(kv_part_id part) const { return parts_.at(part).value.lend(); }
std::int64_t shard_core::version(kv_part_id part) const { return parts_.at(part).version; }

void shard_core::gather_rows(kv_part_id part, const std::vector<std::int64_t>& row_ids, std::int64_t row_numel,
                             tensor_view out) const {
  const tensor& v = parts_.at(part).value.get();
  TROUPE_CHECK(out.numel() == static_cast<std::int64_t>(row_ids.size()) * row_numel, "gather_rows: output size");
  for (std::size_t i = 0; i < row_ids.size(); ++i) {
    TROUPE_CHECK(row_ids[i] >= 0 && (row_ids[i] + 1) * row_numel <= v.numel(), "gather_rows: row out of range");
    copy(out.flat(static_cast<std::int64_t>(i) * row_numel, row_numel),
         v.view().flat(row_ids[i] * row_numel, row_numel));
  }
}

}  // namespace troupe
