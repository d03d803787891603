// Test helpers for numeric code: seeded random tensors, naive references, a
// central-difference gradient check that accumulates the probe loss in double, and a
// scoped compute-thread count.
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <vector>

#include "tensor/gemm.hpp"
#include "tensor/random.hpp"
#include "tensor/tensor.hpp"

namespace troupe::test {

// The compute threads (blas_threads()) set to n for this object's life, then the
// previous count back.
class scoped_threads {
 public:
  explicit scoped_threads(int n) : before_(blas_threads()) { set_blas_threads(n); }
  ~scoped_threads() { set_blas_threads(before_); }
  scoped_threads(const scoped_threads&) = delete;
  scoped_threads& operator=(const scoped_threads&) = delete;

 private:
  int before_;
};

// A 1-d f32 tensor holding `v`.
inline tensor vec(std::initializer_list<float> v) {
  tensor t({static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// A 1-d f32 tensor of n elements, each v.
inline tensor filled(std::int64_t n, float v) {
  tensor t({n});
  std::fill_n(t.data<float>(), n, v);
  return t;
}

inline tensor random_tensor(shape s, std::uint64_t seed, float scale = 1.f) {
  tensor t(s);
  rng r(seed);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = scale * r.normal();
  return t;
}

// Whether a and b hold the same bytes.
inline bool same_bits(const_tensor_view a, const_tensor_view b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

// The largest |a[i] - b[i]| (f32 tensors of the same size).
inline float max_abs_diff(const_tensor_view a, const_tensor_view b) {
  float d = 0.f;
  for (std::int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return d;
}

// sum_i a[i] * b[i] in double.
inline double dot(const_tensor_view a, const_tensor_view b) {
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  double s = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(x[i]) * y[i];
  return s;
}

// Checks analytic[i] against (f(x + eps e_i) - f(x - eps e_i)) / (2 eps) for every i (or
// for `max_probes` evenly spaced i), where f reads x. |diff| <= abs_tol + rel_tol * |fd|.
inline void check_gradient(tensor_view x, const_tensor_view analytic, const std::function<double()>& f, double eps,
                           double abs_tol, double rel_tol, std::int64_t max_probes = 400) {
  BOOST_REQUIRE_EQUAL(x.numel(), analytic.numel());
  float* p = x.data<float>();
  const float* g = analytic.data<float>();
  const std::int64_t n = x.numel();
  const std::int64_t step = std::max<std::int64_t>(1, n / max_probes);
  int failures = 0;
  for (std::int64_t i = 0; i < n; i += step) {
    const float saved = p[i];
    p[i] = saved + static_cast<float>(eps);
    const double up = f();
    p[i] = saved - static_cast<float>(eps);
    const double down = f();
    p[i] = saved;
    const double fd = (up - down) / (2 * eps);
    const double diff = std::abs(fd - g[i]);
    if (diff > abs_tol + rel_tol * std::abs(fd) && failures++ < 5)
      BOOST_ERROR("gradient mismatch at " << i << ": analytic " << g[i] << ", finite difference " << fd);
  }
  BOOST_TEST(failures == 0);
}

}  // namespace troupe::test
