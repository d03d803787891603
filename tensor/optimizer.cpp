// optimizer_state (through compute) and the learning-rate schedules.
#include "tensor/optimizer.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include "base/enum_names.hpp"
#include "tensor/ops.hpp"
#include "tensor/update_ops.hpp"

namespace troupe {

// optimizer_kind's names, for its parse and name_of.
constexpr std::array<enum_name<optimizer_kind>, 3> optimizer_kinds{{
    {optimizer_kind::sgd, "sgd"},
    {optimizer_kind::adam, "adam"},
    {optimizer_kind::adamw, "adamw"},
}};

expected<optimizer_kind> parse_optimizer_kind(std::string_view name) {
  return parse_in(optimizer_kinds, name, "optimizer");
}

std::string_view name_of(optimizer_kind x) { return name_in(optimizer_kinds, x); }

expected<adam_betas> parse_adam_betas(std::string_view text) {
  const auto bad = [&] {
    return failure{"Adam's betas '" + std::string(text) +
                   "' are not two numbers in [0, 1) separated by a comma; give them as B1,B2, for example 0.9,0.999 "
                   "(the default) or 0.9,0.99"};
  };
  const auto comma = text.find(',');
  if (comma == std::string_view::npos) return bad();
  float b[2];
  const std::string_view parts[2] = {text.substr(0, comma), text.substr(comma + 1)};
  for (int i = 0; i < 2; ++i) {
    const char* end = parts[i].data() + parts[i].size();
    const auto [ptr, ec] = std::from_chars(parts[i].data(), end, b[i]);
    if (parts[i].empty() || ec != std::errc{} || ptr != end || !(b[i] >= 0.f && b[i] < 1.f)) return bad();
  }
  return adam_betas{b[0], b[1]};
}

optimizer_state::optimizer_state(const optimizer_config& cfg, std::int64_t numel, const compute& c)
    : cfg_(cfg),
      c_(&c),
      numel_(numel),
      slot1_(c.make({numel})),
      slot2_(cfg.kind != optimizer_kind::sgd ? c.make({numel}) : tensor()) {}

void optimizer_state::step(tensor_view params, const_tensor_view grads, float lr, std::optional<float> momentum) {
  TROUPE_CHECK(params.numel() == numel_, "optimizer_state::step: params size");
  step_range(params, grads, 0, lr, ++steps_, momentum);
}

void optimizer_state::step_member(tensor_view params, const_tensor_view grads, tensor_view velocity, float lr) {
  TROUPE_CHECK(cfg_.kind == optimizer_kind::sgd && slot1_.where() == cpu_device,
               "optimizer_state::step_member: SGD on the host only");
  TROUPE_CHECK(params.numel() == numel_, "optimizer_state::step_member: params size");
  sgd_member_step(params, grads, velocity, fn::sgd_member_momentum{lr, cfg_.momentum, cfg_.weight_decay});
  ++steps_;
}

std::optional<std::string> optimizer_state::restore(std::int64_t steps, const_tensor_view slot1,
                                                    const_tensor_view slot2) {
  const auto fits = [&](const_tensor_view t) { return t.type() == dtype::f32 && t.numel() == numel_; };
  if (steps < 0) return "a negative optimizer step count";
  if (!fits(slot1)) return "the optimizer's first slot holds " + std::to_string(slot1.numel()) + " values, not " +
                           std::to_string(numel_);
  const bool adam = cfg_.kind != optimizer_kind::sgd;  // two moments: adam and adamw
  if (adam && !fits(slot2))
    return "Adam's second moment holds " + std::to_string(slot2.numel()) + " values, not " + std::to_string(numel_);
  if (!adam && !slot2.empty()) return "a second optimizer slot, which SGD does not keep (a checkpoint of Adam?)";
  c_->upload(slot1_, slot1);
  if (adam) c_->upload(slot2_, slot2);
  steps_ = steps;
  return std::nullopt;
}

void optimizer_state::step_range(tensor_view params, const_tensor_view grads, std::int64_t offset, float lr,
                                 std::int64_t step, std::optional<float> momentum) {
  const std::int64_t n = params.numel();
  TROUPE_CHECK(offset >= 0 && offset + n <= numel_, "optimizer_state::step_range out of range");
  if (cfg_.kind == optimizer_kind::sgd) {
    c_->sgd_step(params, grads, slot1_.view().flat(offset, n),
                 fn::sgd_momentum{lr, momentum.value_or(cfg_.momentum), cfg_.weight_decay, cfg_.nesterov});
    return;
  }
  const bool decoupled = cfg_.kind == optimizer_kind::adamw;
  if (decoupled && cfg_.weight_decay != 0.f) c_->scale(params, 1.f - lr * cfg_.weight_decay);
  const double t = static_cast<double>(step);
  const fn::adam f{lr,
                   cfg_.beta1,
                   cfg_.beta2,
                   cfg_.eps,
                   decoupled ? 0.f : cfg_.weight_decay,
                   static_cast<float>(1.0 - std::pow(cfg_.beta1, t)),
                   static_cast<float>(std::sqrt(1.0 - std::pow(cfg_.beta2, t)))};
  c_->adam_step(params, grads, slot1_.view().flat(offset, n), slot2_.view().flat(offset, n), f);
}

// lr_schedule_kind's names, for its parse and name_of.
constexpr std::array<enum_name<lr_schedule_kind>, 3> schedule_kinds{{
    {lr_schedule_kind::constant, "constant"},
    {lr_schedule_kind::cosine, "cosine"},
    {lr_schedule_kind::linear, "linear"},
}};

expected<lr_schedule_kind> parse_lr_schedule_kind(std::string_view name) {
  return parse_in(schedule_kinds, name, "learning-rate schedule");
}

std::string_view name_of(lr_schedule_kind x) { return name_in(schedule_kinds, x); }

float lr_schedule::at(std::int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps) {
    const double f = static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    return static_cast<float>(base * (0.1 + 0.9 * f));
  }
  if (kind == lr_schedule_kind::constant) return base;
  const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  const double shape = kind == lr_schedule_kind::cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress))
                                                        : 1.0 - progress;
  return static_cast<float>(base * (final_fraction + (1.0 - final_fraction) * shape));
}

}  // namespace troupe
