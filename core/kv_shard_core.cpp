// kv_shard_core: per-part rounds, updates and held pulls (Note [Per-key rounds] in the header).
#include "core/kv_shard_core.hpp"

#include <algorithm>
#include <limits>

#include "base/check.hpp"
#include "tensor/ops.hpp"

namespace troupe {

namespace {
std::string part_label(const std::string& key, kv_part_id id) {
  return "key " + kv_key_display(key) + " (part " + std::to_string(id & 0xFFFF) + ")";
}
}  // namespace

kv_shard_core::kv_shard_core(kv_shard_config cfg) : cfg_(std::move(cfg)) {}

void kv_shard_core::start(const std::vector<std::uint32_t>& members) {
  members_.clear();
  for (auto m : members) members_[m] = true;
  started_ = true;
}

std::size_t kv_shard_core::live_members() const {
  return static_cast<std::size_t>(std::count_if(members_.begin(), members_.end(), [](auto& m) { return m.second; }));
}

void kv_shard_core::member_joined(std::uint32_t member) {
  members_[member] = true;
  for (auto& [id, p] : parts_) {
    p.pushed[member] = cfg_.mode == sync_mode::sync ? p.version : std::max<std::int64_t>(0, slowest(p));
    for (auto& [round, subs] : p.rounds) subs.erase(member);
  }
  release_ready();
}

void kv_shard_core::member_left(std::uint32_t member) {
  auto it = members_.find(member);
  if (it == members_.end() || !it->second) return;
  it->second = false;
  auto gone = std::stable_partition(held_.begin(), held_.end(), [&](const held_pull& h) { return h.member != member; });
  for (auto i = gone; i != held_.end(); ++i) dropped_.push_back(i->t);
  held_.erase(gone, held_.end());
  if (cfg_.mode == sync_mode::sync)
    for (auto& [id, p] : parts_) close_rounds(p);
  release_ready();
}

std::optional<fault> kv_shard_core::define(kv_part_id id, const std::string& key_name, const_tensor_view initial) {
  if (initial.empty() || initial.type() != dtype::f32 || !initial.is_contiguous())
    return fault{errc::bad_dtype, part_label(key_name, id) + ": an initial value must be contiguous float32"};
  if (auto it = parts_.find(id); it != parts_.end()) {
    if (it->second.value.get().numel() != initial.numel())
      return fault{errc::bad_shape, part_label(key_name, id) + " holds " +
                                        std::to_string(it->second.value.get().numel()) + " elements, not " +
                                        std::to_string(initial.numel())};
    return std::nullopt;  // the first init wins
  }
  if (!all_finite(initial))
    return fault{errc::not_finite, part_label(key_name, id) + ": the initial value holds NaN or infinite values"};
  part_state p;
  p.key = key_name;
  tensor value = tensor::uninitialized({initial.numel()});
  copy(value, initial.reshape({initial.numel()}));
  p.value = lendable_tensor(std::move(value));
  if (cfg_.optimizer) p.opt.emplace(cfg_.optimizer->config, initial.numel());
  parts_.emplace(id, std::move(p));
  return std::nullopt;
}

void kv_shard_core::set_optimizer(std::optional<kv_optimizer> opt) {
  const bool same_rule = opt && cfg_.optimizer && opt->config == cfg_.optimizer->config;
  cfg_.optimizer = std::move(opt);
  if (same_rule) return;
  for (auto& [id, p] : parts_) {
    p.opt.reset();
    if (cfg_.optimizer) p.opt.emplace(cfg_.optimizer->config, p.value.get().numel());
  }
}

std::optional<fault> kv_shard_core::check(std::uint32_t member, kv_part_id part) const {
  if (!started_) return fault{errc::not_started, "shard " + std::to_string(cfg_.index) + " has not started yet"};
  auto m = members_.find(member);
  if (m == members_.end() || !m->second)
    return fault{errc::not_member, "worker " + std::to_string(member) + " is not a live member of this job"};
  if (!parts_.count(part))
    return fault{errc::bad_shard, "part " + std::to_string(part & 0xFFFF) + " of key id " + std::to_string(part >> 16) +
                                      " is not initialised on shard " + std::to_string(cfg_.index)};
  return std::nullopt;
}

std::int64_t kv_shard_core::pushed(const part_state& p, std::uint32_t member) const {
  auto it = p.pushed.find(member);
  return it == p.pushed.end() ? 0 : it->second;
}

std::int64_t kv_shard_core::slowest(const part_state& p) const {
  std::int64_t s = std::numeric_limits<std::int64_t>::max();
  for (const auto& [rank, live] : members_)
    if (live) s = std::min(s, pushed(p, rank));
  return s;
}

bool kv_shard_core::can_answer(const part_state& p, std::int64_t needs) const {
  switch (cfg_.mode) {
    case sync_mode::sync:
    case sync_mode::allreduce:  // has no shards; refused by validate()
      return p.version >= needs;
    case sync_mode::async:
      return true;
    case sync_mode::ssp:
      return needs - cfg_.staleness <= slowest(p);
  }
  return true;
}

void kv_shard_core::apply(part_state& p, const_tensor_view grad, float lr) {
  tensor& value = p.value.for_update();  // Note [Lent values]
  if (p.opt) {
    std::optional<float> momentum;
    if (cfg_.mode != sync_mode::sync && cfg_.rule != async_rule::none && cfg_.optimizer &&
        cfg_.optimizer->config.kind == optimizer_kind::sgd) {
      // The momentum only: the lr is the user's program's (its scheduler sets it).
      momentum = correct_for_asynchrony(cfg_.optimizer->config.momentum, static_cast<std::uint32_t>(live_members()))
                     .momentum;
    }
    p.opt->step(value, grad, lr, momentum);
  } else
    copy(value, grad);
  ++p.version;
  ++updates_;
}

std::optional<fault> kv_shard_core::check_push(std::uint32_t member, kv_part_id part, const_tensor_view grad,
                                               bool finite) const {
  if (auto e = check(member, part)) return e;
  const part_state& p = parts_.at(part);
  if (grad.empty() || grad.type() != dtype::f32 || !grad.is_contiguous() || grad.numel() != p.value.get().numel())
    return fault{errc::bad_shape,
                 part_label(p.key, part) + " holds " + std::to_string(p.value.get().numel()) +
                     " float32 elements; the gradient pushed has " +
                     (grad.empty() ? std::string("none")
                                   : std::to_string(grad.numel()) + " " + std::string(name_of(grad.type())))};
  if (!finite && !all_finite(grad))
    return fault{errc::not_finite, part_label(p.key, part) + ": the gradient holds NaN or infinite values"};
  const std::int64_t round = pushed(p, member);
  if (cfg_.mode == sync_mode::sync && round - p.version >= max_rounds_ahead)
    return fault{errc::bad_clock, part_label(p.key, part) + ": worker " + std::to_string(member) + " pushed " +
                                      std::to_string(round - p.version) +
                                      " rounds ahead of the others; pull between pushes"};
  return std::nullopt;
}

// A push that check_push accepted.
kv_shard_core::push_outcome kv_shard_core::apply_push(std::uint32_t member, kv_part_id part, std::int64_t base_version,
                                                      const_tensor_view grad) {
  push_outcome out;
  part_state& p = parts_.at(part);
  const_tensor_view flat = grad.reshape({grad.numel()});
  const std::int64_t round = pushed(p, member);
  p.pushed[member] = round + 1;
  if (cfg_.mode == sync_mode::sync) {
    tensor copy_of = tensor::uninitialized({flat.numel()});
    copy(copy_of, flat);
    p.rounds[round].emplace(member, std::move(copy_of));
    out.staleness = std::max<std::int64_t>(0, round - base_version);
    close_rounds(p);
  } else {
    out.staleness = std::max<std::int64_t>(0, p.version - base_version);
    float lr = cfg_.optimizer ? cfg_.optimizer->schedule.at(p.version) : 0.f;
    if (cfg_.staleness_lr) lr /= static_cast<float>(std::max<std::int64_t>(1, out.staleness));
    apply(p, flat, lr);
  }
  out.version = p.version;
  return out;
}

kv_shard_core::push_outcome kv_shard_core::push(std::uint32_t member, kv_part_id part, std::int64_t base_version,
                                                const_tensor_view grad) {
  if (auto e = check_push(member, part, grad, false)) {
    push_outcome out;
    out.error = e;
    if (parts_.count(part)) out.version = parts_.at(part).version;
    return out;
  }
  auto out = apply_push(member, part, base_version, grad);
  release_ready();
  return out;
}

kv_shard_core::push_outcome_all kv_shard_core::push_parts(std::uint32_t member, const std::vector<kv_part_id>& parts,
                                                          const std::vector<std::int64_t>& base_versions,
                                                          const std::vector<const_tensor_view>& grads,
                                                          bool finite) {
  push_outcome_all out;
  if (base_versions.size() != parts.size() || grads.size() != parts.size()) {
    out.error = fault{errc::malformed, "a push of " + std::to_string(parts.size()) + " parts with " +
                                           std::to_string(base_versions.size()) + " versions and " +
                                           std::to_string(grads.size()) + " gradients"};
    return out;
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (std::count(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(i), parts[i])) {
      out.error = fault{errc::malformed, "a push names part " + std::to_string(parts[i] & 0xFFFF) + " of key id " +
                                             std::to_string(parts[i] >> 16) + " twice"};
      return out;
    }
    if (auto e = check_push(member, parts[i], grads[i], finite)) {
      out.error = e;
      return out;
    }
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto r = apply_push(member, parts[i], base_versions[i], grads[i]);
    out.versions.push_back(r.version);
    out.staleness.push_back(r.staleness);
  }
  release_ready();
  return out;
}

void kv_shard_core::close_rounds(part_state& p) {
  for (;;) {
    auto open = p.rounds.find(p.version);
    std::size_t live = 0;
    for (const auto& [rank, is_live] : members_) {
      if (!is_live) continue;
      ++live;
      if (open == p.rounds.end() || !open->second.count(rank)) return;  // a live member has not pushed yet
    }
    if (live == 0 || open == p.rounds.end()) return;
    // Sum in rank order (the map's order), whatever the arrival order. A member that has
    // left since it pushed still contributes: its gradient was valid when it came.
    auto& subs = open->second;
    auto it = subs.begin();
    tensor sum = std::move(it->second);
    for (++it; it != subs.end(); ++it) axpy(sum.view(), 1.f, it->second.view());
    const float lr = cfg_.optimizer ? cfg_.optimizer->schedule.at(p.version) : 0.f;
    p.rounds.erase(open);
    apply(p, sum, lr);
  }
}

kv_shard_core::pull_outcome kv_shard_core::pull(std::uint32_t member, kv_part_id part, token t) {
  pull_outcome out;
  if (auto e = check(member, part)) {
    out.decision = pull_decision::reject;
    out.error = e;
    return out;
  }
  const part_state& p = parts_.at(part);
  const std::int64_t needs = pushed(p, member);
  if (can_answer(p, needs)) return out;
  held_.push_back({t, member, part, needs});
  out.decision = pull_decision::hold;
  return out;
}

void kv_shard_core::release_ready() {
  auto ready = std::stable_partition(held_.begin(), held_.end(),
                                     [&](const held_pull& h) { return !can_answer(parts_.at(h.part), h.needs); });
  for (auto it = ready; it != held_.end(); ++it) released_.push_back(it->t);
  held_.erase(ready, held_.end());
}

std::vector<kv_shard_core::token> kv_shard_core::take_released() { return std::exchange(released_, {}); }
std::vector<kv_shard_core::token> kv_shard_core::take_dropped() { return std::exchange(dropped_, {}); }

const_tensor_view kv_shard_core::value(kv_part_id part) const { return parts_.at(part).value.get().view(); }

tensor kv_shard_core::lend_value(kv_part_id part) const { return parts_.at(part).value.lend(); }
std::int64_t kv_shard_core::version(kv_part_id part) const { return parts_.at(part).version; }

void kv_shard_core::gather_rows(kv_part_id part, const std::vector<std::int64_t>& row_ids, std::int64_t row_numel,
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
