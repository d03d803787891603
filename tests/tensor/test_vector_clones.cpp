// Tests for tensor/vector_clones.hpp: a TROUPE_VECTOR_CLONES function runs the widest
// clone the CPU supports. Seen through Note [Vector clones]'s contraction: where the CPU
// runs x86-64-v3 or v4, a * b + c becomes one fused multiply-add, whose single rounding
// keeps what the baseline clone's two roundings lose.
#define BOOST_TEST_MODULE vector_clones
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "tensor/vector_clones.hpp"

namespace {

TROUPE_VECTOR_CLONES void multiply_add(float* out, const float* a, const float* b, const float* c, int n) {
  for (int i = 0; i < n; ++i) out[i] = a[i] * b[i] + c[i];
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_widest_clone_the_cpu_runs_is_called) {
#if defined(__x86_64__) && defined(__GNUC__)
  // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24; rounded to a float it loses the 2^-24 (a tie, to even).
  const float x = 1.f + std::ldexp(1.f, -12);
  const int n = 37;  // past a vector's width, with a remainder
  std::vector<float> a(n, x), b(n, x), c(n, -(1.f + std::ldexp(1.f, -11))), out(n, -1.f);
  multiply_add(out.data(), a.data(), b.data(), c.data(), n);
  __builtin_cpu_init();
  const bool wide = __builtin_cpu_supports("x86-64-v3");
  const float want = wide ? std::ldexp(1.f, -24) : 0.f;
  for (int i = 0; i < n; ++i) BOOST_TEST(out[i] == want);
#else
  BOOST_TEST_MESSAGE("not x86-64 with GCC: TROUPE_VECTOR_CLONES is the one baseline function");
#endif
}
