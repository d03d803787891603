// shard_core: taking and applying gradients (Note [Rounds per part] in the header): a
// training member's gradient of a stated clock and a user's loop's pushes of parts, each
// checked before anything changes; a sync round summed in rank order and applied once
// when it closes, and a push applied on arrival in async and ssp with the staleness and
// --async-rule corrections; the staleness each one records.
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

std::int64_t shard_core::version() const {
  std::int64_t v = 0;
  bool first = true;
  for (const auto& [id, p] : parts_) {
    if (cfg_.mode != sync_mode::sync)
      v += p.version;
    else
      v = first ? p.version : std::min(v, p.version);
    first = false;
  }
  return v;
}

std::int64_t shard_core::version_for(std::uint32_t member) const {
  const part_state* p = find_part(member);
  return p ? p->version : version();
}

shard_core::verdict shard_core::check_clock(const part_state& p, std::uint32_t member, std::int64_t clock) const {
  auto q = p.pushers.find(member);
  const std::int64_t next = q == p.pushers.end() ? 0 : q->second.next;
  const std::int64_t from_round = q == p.pushers.end() ? 0 : q->second.from_round;
  const std::string w = std::to_string(member), c = std::to_string(clock);
  if (cfg_.mode != sync_mode::sync) {
    if (clock < next) return fault{errc::duplicate, "worker " + w + " already pushed clock " + c};
    if (clock > next)
      return fault{errc::bad_clock,
                   "worker " + w + " pushed clock " + c + " but its next clock is " + std::to_string(next)};
    return std::nullopt;
  }
  if (clock < p.version)
    return fault{errc::stale_round,
                 "gradient for round " + c + ", which closed already (now " + std::to_string(p.version) + ")"};
  if (clock > p.version)
    return fault{errc::bad_clock, "gradient for round " + c + " while round " + std::to_string(p.version) + " is open"};
  if (from_round > clock)
    return fault{errc::bad_clock, "worker " + w + " rejoined for round " + std::to_string(from_round)};
  if (next > clock) return fault{errc::duplicate, "second gradient from worker " + w + " for round " + c};
  return std::nullopt;
}

shard_core::verdict shard_core::check_ahead(const part_state& p, kv_part_id id, std::uint32_t member) const {
  const std::int64_t ahead = next_of(p, member) - p.version;
  if (cfg_.mode != sync_mode::sync || ahead < max_rounds_ahead) return std::nullopt;
  return fault{errc::bad_clock, part_label(p, id) + ": worker " + std::to_string(member) + " pushed " +
                                    std::to_string(ahead) + " rounds ahead of the others; pull between pushes"};
}

shard_core::push_outcome shard_core::push(std::uint32_t member, std::int64_t clock, std::int64_t base_version,
                                          tensor grad, const gradient_receipt& how) {
  if (auto e = check_sender(member)) return reject(*e, version());
  const part_state& p = parts_.at(part_of(member));
  const std::int64_t n = p.numel();
  const bool whole =
      (how.piece_numel == 0 || (how.piece_offset == 0 && how.piece_numel == n)) && !p.partial.count(member);
  if (!whole) return push_piece(member, clock, base_version, std::move(grad), how);
  verdict refused;
  if (!how.unreadable.empty()) refused = fault{errc::malformed, how.unreadable};
  return submit(member, clock, base_version, std::move(grad), std::move(refused), how.finite);
}

shard_core::push_outcome shard_core::submit(std::uint32_t member, std::int64_t clock, std::int64_t base_version,
                                            tensor grad, verdict refused, bool finite) {
  const kv_part_id id = part_of(member);
  part_state& p = parts_.at(id);
  if (late(p, clock)) return drop_late(p, member);
  if (auto bad = check_clock(p, member, clock)) return reject(*bad, p.version);
  if (!refused) refused = check_tensor(p, id, grad, p.numel(), finite);
  if (!refused) return accept(p, member, clock, base_version, gradient{grad.view(), &grad});
  // Refused, it is still the clock's submission (Note [Rounds per part]).
  p.pushers[member].next = clock + 1;
  if (cfg_.mode == sync_mode::sync) p.rounds[clock].emplace(member, tensor());
  auto out = reject(*refused, p.version);
  if (cfg_.mode == sync_mode::sync) {
    close_rounds(p);
    out.version = p.version;
  } else {
    maybe_back_in_bound(member);
    note_reached();
  }
  release_ready();
  return out;
}

shard_core::push_outcome shard_core::push_part(std::uint32_t member, kv_part_id part, std::int64_t base_version,
                                               const_tensor_view grad) {
  auto all = push_parts(member, {part}, {base_version}, {grad});
  push_outcome out;
  out.error = std::move(all.error);
  if (!all.versions.empty()) {
    out.version = all.versions[0];
    out.staleness = all.staleness[0];
  } else if (parts_.count(part)) {
    out.version = parts_.at(part).version;
  }
  return out;
}

shard_core::push_outcome_all shard_core::push_parts(std::uint32_t member, const std::vector<kv_part_id>& parts,
                                                    const std::vector<std::int64_t>& base_versions,
                                                    const std::vector<const_tensor_view>& grads, bool finite) {
  push_outcome_all out;
  auto refuse = [&](fault f) {
    ++counters_.rejected;
    ++counters_.rejected_by[f.code];
    out.error = std::move(f);
    return out;
  };
  if (base_versions.size() != parts.size() || grads.size() != parts.size())
    return refuse({errc::malformed, "a push of " + std::to_string(parts.size()) + " parts with " +
                                        std::to_string(base_versions.size()) + " versions and " +
                                        std::to_string(grads.size()) + " gradients"});
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (std::count(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(i), parts[i]))
      return refuse({errc::malformed, "a push names part " + std::to_string(parts[i] & 0xFFFF) + " of key id " +
                                          std::to_string(parts[i] >> 16) + " twice"});
    verdict e = check_member_part(member, parts[i]);
    if (!e) {
      const part_state& p = parts_.at(parts[i]);
      e = check_tensor(p, parts[i], grads[i], p.numel(), finite);
      if (!e) e = check_ahead(p, parts[i], member);
    }
    if (e) return refuse(std::move(*e));
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    part_state& p = parts_.at(parts[i]);
    const auto r = late(p, next_of(p, member)) ? drop_late(p, member)
                                               : accept(p, member, std::nullopt, base_versions[i],
                                                        gradient{grads[i].reshape({grads[i].numel()})});
    out.versions.push_back(r.version);
    out.staleness.push_back(r.staleness);
  }
  return out;
}

shard_core::push_outcome shard_core::accept(part_state& p, std::uint32_t member, std::optional<std::int64_t> clock,
                                            std::int64_t base_version, gradient g) {
  pusher& q = p.pushers[member];
  const std::int64_t round = clock.value_or(q.next);
  q.next = round + 1;
  push_outcome out;
  ++counters_.gradients;
  if (cfg_.mode == sync_mode::sync) {
    tensor kept;
    if (g.owned) {
      kept = std::move(*g.owned);
    } else {
      kept = tensor::uninitialized({g.view.numel()});
      copy(kept, g.view);
    }
    p.rounds[round].emplace(member, std::move(kept));
    out.staleness = std::max<std::int64_t>(0, round - base_version);
    record_staleness(out.staleness);
    close_rounds(p);
  } else {
    maybe_back_in_bound(member);
    // The image is taken after this call, with this gradient applied (Note [Checkpoint steps]).
    note_reached();
    out.staleness = std::max<std::int64_t>(0, p.version - base_version);
    apply_on_arrival(p, member, clock, g.view, out.staleness);
    record_staleness(out.staleness);
  }
  out.version = p.version;
  release_ready();
  return out;
}

void shard_core::apply(part_state& p, const_tensor_view grad, float lr, std::optional<float> momentum) {
  tensor& value = p.value.for_update();  // Note [Lent values]
  if (p.opt)
    p.opt->step(value, grad, lr, momentum);
  else
    copy(value, grad);
  ++counters_.updates;
}

void shard_core::close_rounds(part_state& p) {
  bool closed = false;
  while (round_complete(p, p.version)) {
    // Sum in rank order (the map's order), whatever the arrival order. A member that has
    // left since it pushed still contributes: its gradient was valid when it came.
    tensor sum;
    if (auto open = p.rounds.find(p.version); open != p.rounds.end()) {
      for (auto& [rank, g] : open->second) {
        if (g.empty()) continue;  // a refused submission
        if (sum.empty())
          sum = std::move(g);
        else
          axpy(sum.view(), 1.f, g.view());
      }
      p.rounds.erase(open);
    }
    if (!sum.empty()) apply(p, sum, cfg_.has_optimizer ? cfg_.schedule.at(p.version) : 0.f, std::nullopt);
    ++p.version;
    closed = true;
  }
  if (closed) note_reached();
}

void shard_core::apply_on_arrival(part_state& p, std::uint32_t member, std::optional<std::int64_t> clock,
                                  const_tensor_view grad, std::int64_t staleness) {
  const shard_core::member& m = members_.at(member);
  float lr = cfg_.has_optimizer ? cfg_.schedule.at(clock.value_or(p.version)) : 0.f;
  if (cfg_.staleness_lr || m.outside_bound) lr /= static_cast<float>(std::max<std::int64_t>(1, staleness));
  if (cfg_.rule == async_rule::dana && p.opt && cfg_.optimizer.kind == optimizer_kind::sgd &&
      cfg_.optimizer.momentum > 0.f) {
    // Note [Momentum per member]: a push's step is its member's share of the round's; one
    // pusher alone steps plain SGD below.
    const std::uint32_t n = live_pushers(m.stage);
    if (n > 1) {
      if (!cfg_.rule_keeps_lr) lr /= static_cast<float>(n);
      p.momenta.step(*p.opt, member, p.value.for_update(), grad, lr, n);
      ++counters_.updates;
      ++p.version;
      return;
    }
    p.momenta.alone(*p.opt);
  }
  std::optional<float> momentum;
  if (cfg_.rule != async_rule::none && cfg_.has_optimizer && cfg_.optimizer.kind == optimizer_kind::sgd) {
    const momentum_correction c = correct_for_asynchrony(cfg_.optimizer.momentum, live_pushers(m.stage));
    momentum = c.momentum;
    if (!cfg_.rule_keeps_lr) lr *= c.lr_scale;
  }
  apply(p, compensated(p, member, grad), lr, momentum);
  ++p.version;
}

}  // namespace troupe
