// member_momenta (Note [Momentum per member] in the header).
#include "core/member_momenta.hpp"

#include <algorithm>

#include "base/check.hpp"
#include "tensor/ops.hpp"

namespace troupe {

void member_momenta::step(optimizer_state& opt, std::uint32_t member, tensor_view params, const_tensor_view grad,
                          float lr, std::uint32_t pushers) {
  tensor& v = velocity_[member];
  if (v.numel() != params.numel()) {
    v = tensor({params.numel()});
    if (sharing_) {
      // Its share of the sum as the first of these pushes found it.
      if (shared_sum_.empty()) {
        shared_sum_ = tensor(opt.slot(0));
        unclaimed_ = tensor(opt.slot(0));
      }
      const float share = 1.f / static_cast<float>(std::max<std::uint32_t>(1, pushers));
      axpy(v.view(), share, shared_sum_.view());
      axpy(unclaimed_.view(), -share, shared_sum_.view());
      if (++shares_taken_ >= pushers) {
        sharing_ = false;
        shared_sum_ = tensor();
        unclaimed_ = tensor();
      }
    }
  }
  slot_is_sum_ = false;
  opt.step_member(params, grad, v.view(), lr);
}

tensor member_momenta::sum(const optimizer_state& opt) const {
  if (slot_is_sum_) return tensor(opt.slot(0));
  tensor total({opt.numel()});
  for (const auto& [member, v] : velocity_)
    if (v.numel() == total.numel()) axpy(total.view(), 1.f, v.view());
  if (!unclaimed_.empty()) axpy(total.view(), 1.f, unclaimed_.view());
  return total;
}

void member_momenta::forget(std::uint32_t member) { velocity_.erase(member); }

void member_momenta::start_from_slot() {
  velocity_.clear();
  slot_is_sum_ = true;
  sharing_ = true;
  shared_sum_ = tensor();
  unclaimed_ = tensor();
  shares_taken_ = 0;
}

void member_momenta::alone(optimizer_state& opt) {
  if (slot_is_sum_ && sharing_) return;  // plain SGD steps slot 0 already
  if (!slot_is_sum_) {
    const tensor total = sum(opt);
    const auto wrong = opt.restore(opt.steps(), total, tensor());
    TROUPE_CHECK(!wrong, "member_momenta::alone: " + wrong.value_or(""));
  }
  start_from_slot();
}

void member_momenta::clear() {
  velocity_.clear();
  slot_is_sum_ = true;
  sharing_ = false;
  shared_sum_ = tensor();
  unclaimed_ = tensor();
  shares_taken_ = 0;
}

}  // namespace troupe
