// optimizer_state, which owns the optimizer's state for one flat range of parameters (a
// whole model on a local trainer, a stage, or the blocks of one shard server) in a
// compute's memory and updates through that compute, and the learning-rate schedules.
// The update loops themselves are tensor/update_ops.hpp, below compute.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "tensor/compute.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

// adamw: Adam with decoupled weight decay (Loshchilov and Hutter 2019; PyTorch's AdamW):
// the parameters shrink by lr * weight_decay before the Adam step, which sees no decay.
enum class optimizer_kind : std::uint8_t { sgd, adam, adamw };
expected<optimizer_kind> parse_optimizer_kind(std::string_view name);
std::string_view name_of(optimizer_kind k);

// Adam's two moment decays written "B1,B2" (as PyTorch's betas=(B1, B2)), each in [0, 1).
struct adam_betas {
  float beta1 = 0.9f, beta2 = 0.999f;
};
expected<adam_betas> parse_adam_betas(std::string_view text);

struct optimizer_config {
  optimizer_kind kind = optimizer_kind::sgd;
  float momentum = 0.9f;       // sgd
  bool nesterov = false;       // sgd
  float weight_decay = 0.f;    // sgd and adam: L2, added to the gradient; adamw: decoupled
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam and adamw
  bool operator==(const optimizer_config&) const = default;
};

class optimizer_state {
 public:
  // The state lives in `c`'s memory and updates run there (c must outlive this object);
  // params and grads passed to step() are then in that memory too.
  optimizer_state(const optimizer_config& cfg, std::int64_t numel, const compute& c = host_compute());
  // Applies one update with learning rate lr. params and grads have numel() elements.
  // momentum: SGD's momentum for this update instead of the config's (a shard's
  // correction for asynchrony, core/update_rules.hpp); Adam ignores it.
  void step(tensor_view params, const_tensor_view grads, float lr, std::optional<float> momentum = std::nullopt);
  // Updates only elements [offset, offset + params.numel()) of the range this state
  // covers: params and grads are that sub-range. t is the step count Adam's bias
  // correction uses for it (steps() is not advanced).
  void step_range(tensor_view params, const_tensor_view grads, std::int64_t offset, float lr, std::int64_t t,
                  std::optional<float> momentum = std::nullopt);
  // SGD on the host only (Note [Momentum per member] in core/member_momenta.hpp): one
  // member's update with its own velocity (the member's buffer, zero at its start); slot 0
  // is left as it is (member_momenta owns the velocities then); counts a step.
  void step_member(tensor_view params, const_tensor_view grads, tensor_view velocity, float lr);
  std::int64_t steps() const { return steps_; }
  std::int64_t numel() const { return numel_; }
  // The state a checkpoint keeps: slot 0 (SGD's velocity, Adam's first moment) and slot 1
  // (Adam's second moment; empty for SGD), in the compute's memory.
  const tensor& slot(int i) const { return i == 0 ? slot1_ : slot2_; }
  // Restores a checkpoint's state: the step count and host copies of the slots (slot2
  // empty for SGD). Why not, when a slot does not fit this state.
  std::optional<std::string> restore(std::int64_t steps, const_tensor_view slot1, const_tensor_view slot2);
  const optimizer_config& config() const { return cfg_; }

 private:
  optimizer_config cfg_;
  const compute* c_;
  std::int64_t numel_;
  std::int64_t steps_ = 0;
  tensor slot1_;  // sgd: velocity; adam, adamw: first moment
  tensor slot2_;  // adam, adamw: second moment
};

enum class lr_schedule_kind : std::uint8_t { constant, cosine, linear };
expected<lr_schedule_kind> parse_lr_schedule_kind(std::string_view name);
std::string_view name_of(lr_schedule_kind k);

// Linear warm-up from base/10 over warmup_steps, then constant, cosine or linear decay to
// base * final_fraction at total_steps.
struct lr_schedule {
  lr_schedule_kind kind = lr_schedule_kind::constant;
  float base = 0.05f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  float final_fraction = 0.f;
  float at(std::int64_t step) const;
};

}  // namespace troupe
