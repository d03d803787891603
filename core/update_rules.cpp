// The critical-batch cap, the momentum of asynchrony and DC-ASGD's compensation (see the
// Notes in the header).
#include "core/update_rules.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"
#include "base/enum_names.hpp"

namespace troupe {

// async_rule's names, for its parse and name_of.
constexpr std::array<enum_name<async_rule>, 4> async_rules{{
    {async_rule::none, "none"},
    {async_rule::momentum, "momentum"},
    {async_rule::dcasgd, "dcasgd"},
    {async_rule::dana, "dana"},
}};

expected<async_rule> parse_async_rule(std::string_view name) { return parse_in(async_rules, name, "async rule"); }

std::string_view name_of(async_rule x) { return name_in(async_rules, x); }

lr_schedule cap_at_critical_batch(lr_schedule s, std::uint32_t workers, std::int64_t batch,
                                  std::int64_t critical_batch) {
  const double total = static_cast<double>(workers) * static_cast<double>(batch);
  const double cap = static_cast<double>(std::max(critical_batch, batch));
  if (critical_batch <= 0 || total <= cap) return s;
  const double factor = cap / total;
  s.base = static_cast<float>(s.base * factor);
  s.warmup_steps = std::min(s.total_steps, static_cast<std::int64_t>(std::llround(s.warmup_steps / factor)));
  return s;
}

lr_schedule warm_up_for_asynchrony(lr_schedule s, std::uint32_t pushers) {
  if (pushers <= async_warmup_workers) return s;
  const double factor = static_cast<double>(pushers) / async_warmup_workers;
  s.warmup_steps = std::min(s.total_steps, static_cast<std::int64_t>(std::llround(s.warmup_steps * factor)));
  return s;
}

momentum_correction correct_for_asynchrony(float momentum, std::uint32_t pushers) {
  if (pushers <= 1) return {momentum, 1.f};
  const double n = pushers;
  const double explicit_momentum = 1.0 - n * (1.0 - momentum);
  if (explicit_momentum >= 0.0) return {static_cast<float>(explicit_momentum), 1.f};
  return {0.f, static_cast<float>(1.0 / (n * (1.0 - momentum)))};
}

void compensate_delay(tensor_view out, const_tensor_view g, const_tensor_view now, const_tensor_view pulled,
                      float lambda) {
  const std::int64_t n = g.numel();
  TROUPE_CHECK(out.numel() == n && now.numel() == n && pulled.numel() == n, "compensate_delay: lengths differ");
  float* o = out.data<float>();
  const float* gp = g.data<float>();
  const float* w = now.data<float>();
  const float* b = pulled.data<float>();
  for (std::int64_t i = 0; i < n; ++i) o[i] = gp[i] + lambda * gp[i] * gp[i] * (w[i] - b[i]);
}

}  // namespace troupe
