// member_momenta (Note [Momentum per member] in the header).
#include "core/member_momenta.hpp"

#include <algorithm>

#include "tensor/ops.hpp"

namespace troupe {

void member_momenta::step(optimizer_state& opt, std::uint32_t member, tensor_view params, const_tensor_view grad,
                          float lr, std::uint32_t pushers) {
  tensor& v = velocity_[member];
  if (v.numel() != params.numel()) {
    v = tensor({params.numel()});
    if (sharing_) {
      // Its share of the sum as the first of these pushes found it; slot 0 counts it already.
      if (shared_sum_.empty()) shared_sum_ = tensor(opt.slot(0));
      axpy(v.view(), 1.f / static_cast<float>(std::max<std::uint32_t>(1, pushers)), shared_sum_.view());
      if (++shares_taken_ >= pushers) {
        sharing_ = false;
        shared_sum_ = tensor();
      }
    }
  }
  opt.step_member(params, grad, v.view(), lr);
}

void member_momenta::forget(optimizer_state* opt, std::uint32_t member) {
  auto it = velocity_.find(member);
  if (it == velocity_.end()) return;
  if (opt && it->second.numel() == opt->numel()) opt->forget_member(it->second.view());
  velocity_.erase(it);
}

void member_momenta::start_from_slot() {
  velocity_.clear();
  sharing_ = true;
  shared_sum_ = tensor();
  shares_taken_ = 0;
}

void member_momenta::alone() {
  if (!sharing_ || !velocity_.empty()) start_from_slot();
}

void member_momenta::clear() {
  velocity_.clear();
  sharing_ = false;
  shared_sum_ = tensor();
  shares_taken_ = 0;
}

}  // namespace troupe
