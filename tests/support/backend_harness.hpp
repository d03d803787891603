// Test helpers for every backend behind tensor/backend_abi.h: the CUDA context (opened
// once per run, or why it cannot be) and a Boost precondition on it, the CPU backend, a
// buffer in a backend's memory, random labels, comparisons with stated tolerances, the
// finite differences' tolerances, and a check registered once per backend.
#pragma once

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "tensor/backend.hpp"
#include "tensor/random.hpp"
#include "tensor/tensor.hpp"

namespace troupe::test {

// The CUDA context, opened once for the whole run, or why it cannot be.
struct cuda_state {
  std::optional<backend_context> ctx;
  std::string why_not;
};
inline cuda_state& cuda() {
  static cuda_state s = [] {
    cuda_state st;
    auto c = backend_context::open({device_kind::cuda, 0});
    if (c) st.ctx.emplace(std::move(c).value());
    else st.why_not = c.error().message;
    return st;
  }();
  return s;
}

inline boost::test_tools::assertion_result cuda_usable(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(cuda().ctx.has_value());
  r.message() << "no CUDA backend here: " << cuda().why_not;
  return r;
}

inline backend_context& cpu() {
  static backend_context c = backend_context::open(cpu_device).value();
  return c;
}

// A buffer in a backend's memory, filled from and read back into host tensors.
class buffer {
 public:
  buffer(backend_context& b, std::size_t bytes) : b_(b), bytes_(bytes) {
    b_.call("alloc", &troupe_backend_v1::alloc, bytes, &p_);
  }
  buffer(backend_context& b, const tensor& host) : buffer(b, host.nbytes()) { upload(host); }
  ~buffer() { b_.call("release", &troupe_backend_v1::release, p_); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  void upload(const tensor& host) {
    BOOST_REQUIRE_EQUAL(host.nbytes(), bytes_);
    b_.call("upload", &troupe_backend_v1::upload, p_, static_cast<const void*>(host.bytes()), bytes_);
  }
  tensor download(shape s, dtype t = dtype::f32) const {
    tensor out(s, t);
    BOOST_REQUIRE_EQUAL(out.nbytes(), bytes_);
    b_.call("download", &troupe_backend_v1::download, static_cast<void*>(out.bytes()), static_cast<const void*>(p_),
            bytes_);
    return out;
  }
  float* f() const { return static_cast<float*>(p_); }
  std::int32_t* i() const { return static_cast<std::int32_t*>(p_); }

 private:
  backend_context& b_;
  void* p_ = nullptr;
  std::size_t bytes_;
};

inline tensor labels_tensor(std::int64_t rows, std::int64_t classes, std::uint64_t seed) {
  tensor t({rows}, dtype::i32);
  rng r(seed);
  for (std::int64_t i = 0; i < rows; ++i) t.data<std::int32_t>()[i] = static_cast<std::int32_t>(r.below(classes));
  return t;
}

// |got - want| <= abs_tol + rel_tol * |want| everywhere; reports the first few misses.
inline void expect_close(const tensor& got, const tensor& want, double abs_tol, double rel_tol, const char* what) {
  BOOST_REQUIRE_EQUAL(got.numel(), want.numel());
  int misses = 0;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    if (!(std::abs(g - w) <= abs_tol + rel_tol * std::abs(w)) && misses++ < 5)
      BOOST_ERROR(what << ": element " << i << " is " << g << ", the reference " << w);
  }
  BOOST_TEST(misses == 0, what << ": " << misses << " elements outside tolerance");
}

inline void expect_equal_i32(const tensor& got, const tensor& want, const char* what) {
  BOOST_REQUIRE_EQUAL(got.numel(), want.numel());
  BOOST_TEST(std::memcmp(got.bytes(), want.bytes(), got.nbytes()) == 0, what << " differs from the reference");
}

// Finite differences through a backend's own forward ops: each check builds
// L = sum(out * r) for a fixed random r, takes the analytic gradient from the backend's
// backward op, and compares with central differences of L (eps 1e-2 in float; 2e-3
// absolute plus 2e-2 relative).
inline constexpr double fd_eps = 1e-2, fd_abs = 2e-3, fd_rel = 2e-2;

}  // namespace troupe::test

// Registers check(backend_context&) as a cpu_ case (always) and a cuda_ case (skipped
// without a device).
#define TROUPE_BACKEND_CASE(check)                                   \
  BOOST_AUTO_TEST_CASE(cpu_##check) { check(troupe::test::cpu()); } \
  BOOST_AUTO_TEST_CASE(cuda_##check, *boost::unit_test::precondition(troupe::test::cuda_usable)) { \
    check(*troupe::test::cuda().ctx);                                \
  }
