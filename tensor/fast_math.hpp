// Arithmetic for the host's hot loops, written so that the compiler vectorises the loops
// calling it. The transcendental functions are plain arithmetic without branches or
// selects on floats (glibc's expf and erff are scalar calls). Both are accurate to a few
// parts in 10^7 relative near 0; exp loses about 1e-7 relative per unit of |x| (its
// argument is reduced in float) and Phi's lower tail as much per unit of x^2 / 2, well
// inside what training notices. The CUDA kernels use the device's own expf and erff.
// The reductions keep `lanes` partial results, each summing every lanes-th element in
// order, then add the lanes in order: a fixed order, so results are reproducible, that a
// vector unit runs in parallel (a single running sum in double or a running max is
// sequential, and stays scalar).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace troupe::fast {

// e^x for finite x <= 0: 2^n 2^f with n the nearest integer to x log2(e) and 2^f,
// |f| <= 1/2, Cephes' exp2f polynomial. Below about -87 it returns about 1e-38 instead
// of less.
inline float exp_nonpositive(float x) {
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;  // round to nearest (1.5 * 2^23)
  const float f = t - n;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.f;
  std::int32_t e = static_cast<std::int32_t>(n) + 127;  // the biased exponent of 2^n
  e = e < 1 ? 1 : e;                                    // an integer select vectorises
  return p * std::bit_cast<float>(e << 23);
}

// Phi(x), the standard normal's distribution function, as 0.5 erfc(-x / sqrt 2) with the
// Chebyshev fit of erfc from Numerical Recipes (6.2), whose relative error is below 1.2e-7
// everywhere, so the tails keep their relative accuracy.
inline float normal_cdf(float x) {
  const float z = std::fabs(x) * 0.70710678118654752f;
  const float t = 1.f / (1.f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float half_erfc = 0.5f * t * exp_nonpositive(p - z * z);  // Phi(-|x|)
  // Phi(x) is half_erfc for negative x and 1 - half_erfc otherwise, chosen by x's sign bit.
  const std::int32_t negative = std::bit_cast<std::int32_t>(x) >> 31;  // all ones or zero
  return std::bit_cast<float>((std::bit_cast<std::int32_t>(half_erfc) & negative) |
                              (std::bit_cast<std::int32_t>(1.f - half_erfc) & ~negative));
}

inline constexpr std::int64_t lanes = 8;

// The sum over i in [0, n) of term(i), a double, in `lanes` partial sums.
template <class Term>
inline double sum_of(std::int64_t n, Term term) {
  double acc[lanes] = {};
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (std::int64_t l = 0; l < lanes; ++l) acc[l] += term(i + l);
  for (std::int64_t l = 0; i < n; ++i, ++l) acc[l] += term(i);
  double s = 0.0;
  for (std::int64_t l = 0; l < lanes; ++l) s += acc[l];
  return s;
}

inline double sum(const float* x, std::int64_t n) {
  return sum_of(n, [x](std::int64_t i) { return static_cast<double>(x[i]); });
}

inline double dot(const float* x, const float* y, std::int64_t n) {
  return sum_of(n, [x, y](std::int64_t i) { return static_cast<double>(x[i]) * y[i]; });
}

// The largest of x[0, n), n >= 1, for finite x (a NaN may or may not win).
inline float max(const float* x, std::int64_t n) {
  float acc[lanes];
  for (std::int64_t l = 0; l < lanes; ++l) acc[l] = x[0];
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (std::int64_t l = 0; l < lanes; ++l) acc[l] = acc[l] > x[i + l] ? acc[l] : x[i + l];
  for (std::int64_t l = 0; i < n; ++i, ++l) acc[l] = acc[l] > x[i] ? acc[l] : x[i];
  float m = acc[0];
  for (std::int64_t l = 1; l < lanes; ++l) m = std::max(m, acc[l]);
  return m;
}

}  // namespace troupe::fast
