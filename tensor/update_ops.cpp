// SGD (shared and per-member velocities) and Adam loops over the shared functors.
#include "tensor/update_ops.hpp"

namespace troupe {

namespace {

void check_same(const_tensor_view a, const_tensor_view b, const char* what) {
  TROUPE_CHECK(a.type() == dtype::f32 && b.type() == dtype::f32 && a.numel() == b.numel() && a.is_contiguous() &&
                   b.is_contiguous(),
               std::string(what) + ": views must be contiguous f32 of equal size");
}

// One pass of an SGD functor over parameters, gradients and one velocity.
template <class F>
void sgd_loop(tensor_view param, const_tensor_view grad, tensor_view velocity, const F& f, const char* what) {
  check_same(param, grad, what);
  check_same(param, velocity, what);
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* v = velocity.data<float>();
  for (std::int64_t i = 0, n = param.numel(); i < n; ++i) f(p[i], g[i], v[i]);
}

}  // namespace

void sgd_step(tensor_view param, const_tensor_view grad, tensor_view velocity, const fn::sgd_momentum& f) {
  sgd_loop(param, grad, velocity, f, "sgd_step");
}

void sgd_member_step(tensor_view param, const_tensor_view grad, tensor_view velocity,
                     const fn::sgd_member_momentum& f) {
  sgd_loop(param, grad, velocity, f, "sgd_member_step");
}

void adam_step(tensor_view param, const_tensor_view grad, tensor_view m, tensor_view v, const fn::adam& f) {
  check_same(param, grad, "adam_step");
  check_same(param, m, "adam_step");
  check_same(param, v, "adam_step");
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* mm = m.data<float>();
  float* vv = v.data<float>();
  for (std::int64_t i = 0, n = param.numel(); i < n; ++i) f(p[i], g[i], mm[i], vv[i]);
}

}  // namespace troupe
