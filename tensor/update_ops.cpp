// SGD (shared and per-member velocities) and Adam loops over the shared functors.
#include "tensor/update_ops.hpp"

namespace troupe {

namespace {

void check_same(const_tensor_view a, const_tensor_view b, const char* what) {
  TROUPE_CHECK(a.type() == dtype::f32 && b.type() == dtype::f32 && a.numel() == b.numel() && a.is_contiguous() &&
                   b.is_contiguous(),
               std::string(what) + ": views must be contiguous f32 of equal size");
}

}  // namespace

void sgd_step(tensor_view param, const_tensor_view grad, tensor_view velocity, const fn::sgd_momentum& f) {
  check_same(param, grad, "sgd_step");
  check_same(param, velocity, "sgd_step");
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* v = velocity.data<float>();
  for (std::int64_t i = 0, n = param.numel(); i < n; ++i) f(p[i], g[i], v[i]);
}

void sgd_member_step(tensor_view param, const_tensor_view grad, tensor_view velocity, tensor_view sum,
                     const fn::sgd_member_momentum& f) {
  check_same(param, grad, "sgd_member_step");
  check_same(param, velocity, "sgd_member_step");
  check_same(param, sum, "sgd_member_step");
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* v = velocity.data<float>();
  float* s = sum.data<float>();
  for (std::int64_t i = 0, n = param.numel(); i < n; ++i) f(p[i], g[i], v[i], s[i]);
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
