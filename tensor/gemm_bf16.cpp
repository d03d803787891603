// gemm_bf16: bf16 rounding and the two engines of a bf16 product.
#include "tensor/gemm_bf16.hpp"

#include <immintrin.h>
#include <omp.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "base/check.hpp"

// Note [bf16 products]
// ~~~~~~~~~~~~~~~~~~~~
// `--precision bf16` is mixed precision as PyTorch's autocast does it on the CPU: the
// products of weights and activations (linear layers, convolutions, the attention
// projections) take bfloat16 operands and sum in fp32; everything else (the master
// weights, the optimizer, norms, softmax, the loss, gradients as they are stored and
// sent) stays fp32.
//
// Each call rounds op(a) and op(b) into per-thread bf16 buffers (round to nearest even,
// 32 values per instruction with AVX512-BF16), then multiplies them with oneDNN's bf16
// matmul, which uses the CPU's bf16 dot products (vdpbf16ps: twice the products of an
// fp32 FMA per instruction). The matmul's strides express the transposes, so nothing is
// copied besides the rounding; oneDNN's primitive cache makes a repeated shape cost about
// a microsecond to set up. alpha is the matmul's output scale and beta its sum post-op.
// oneDNN runs on the calling thread's OpenMP team, which is set to blas_threads() so
// that it splits work exactly as OpenBLAS would.
//
// Without AVX512-BF16 (or a oneDNN that offers no bf16 matmul) the rounded operands go,
// as fp32, to OpenBLAS: the same products, another summation order, and slower than fp32.
// The run says which engine it uses.

namespace troupe {

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

bool cpu_has_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
  return has;
}

__attribute__((target("avx512f,avx512bf16"))) void round_avx512(std::uint16_t* dst, const float* src,
                                                                std::int64_t n, std::int64_t& done) {
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
    _mm512_storeu_si512(dst + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  done = i;
}

// op(x) of a (rows, cols) operand stored with leading dimension ld, rounded into a dense
// row-major buffer of the same stored layout.
const std::uint16_t* round_operand(std::vector<std::uint16_t>& buf, const float* x, std::int64_t rows,
                                   std::int64_t cols, std::int64_t ld) {
  buf.resize(static_cast<std::size_t>(rows * cols));
  if (ld == cols) {
    round_to_bf16(buf.data(), x, rows * cols);
  } else {
    for (std::int64_t r = 0; r < rows; ++r) round_to_bf16(buf.data() + r * cols, x + r * ld, cols);
  }
  return buf.data();
}

void scale_result(float* c, std::int64_t m, std::int64_t n, std::int64_t ldc, float beta) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
}

struct onednn_state {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
};

const onednn_state& onednn() {
  static const onednn_state s;
  return s;
}

dnnl::matmul::primitive_desc onednn_matmul(transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                                           std::int64_t k, float alpha, float beta, std::int64_t ldc) {
  using dt = dnnl::memory::data_type;
  // Stored operands are dense (round_operand); the strides say how op() reads them.
  const dnnl::memory::desc a({m, k}, dt::bf16, ta == transpose::yes ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
  const dnnl::memory::desc b({k, n}, dt::bf16, tb == transpose::yes ? dnnl::memory::dims{1, k} : dnnl::memory::dims{n, 1});
  const dnnl::memory::desc c({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  if (beta != 0.f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, onednn().engine);
}

bool onednn_offers_bf16() {
  static const bool offers = [] {
    if (!cpu_has_bf16()) return false;
    try {
      (void)onednn_matmul(transpose::no, transpose::no, 2, 2, 2, 1.f, 0.f, 2);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return offers;
}

struct operand_buffers {
  std::vector<std::uint16_t> a, b;
  std::vector<float> a32, b32;
};

operand_buffers& buffers() {
  thread_local operand_buffers b;
  return b;
}

void via_onednn(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc) {
  operand_buffers& buf = buffers();
  const std::uint16_t* ab = round_operand(buf.a, a, ta == transpose::yes ? k : m, ta == transpose::yes ? m : k, lda);
  const std::uint16_t* bb = round_operand(buf.b, b, tb == transpose::yes ? n : k, tb == transpose::yes ? k : n, ldb);
  const int threads = blas_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  try {
    const auto pd = onednn_matmul(ta, tb, m, n, k, alpha, beta, ldc);
    const dnnl::matmul mm(pd);
    thread_local dnnl::stream stream(onednn().engine);
    dnnl::memory am(pd.src_desc(), onednn().engine, const_cast<std::uint16_t*>(ab));
    dnnl::memory bm(pd.weights_desc(), onednn().engine, const_cast<std::uint16_t*>(bb));
    dnnl::memory cm(pd.dst_desc(), onednn().engine, c);
    mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  } catch (const dnnl::error& e) {
    TROUPE_CHECK(false, std::string("oneDNN's bf16 matmul failed: ") + e.what());
  }
}

void via_rounded_sgemm(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                       const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                       std::int64_t ldc) {
  operand_buffers& buf = buffers();
  auto widen = [](std::vector<float>& out, std::vector<std::uint16_t>& tmp, const float* x, std::int64_t rows,
                  std::int64_t cols, std::int64_t ld) {
    const std::uint16_t* r = round_operand(tmp, x, rows, cols, ld);
    out.resize(tmp.size());
    for (std::size_t i = 0; i < tmp.size(); ++i) out[i] = from_bf16(r[i]);
    return out.data();
  };
  const std::int64_t a_cols = ta == transpose::yes ? m : k, b_cols = tb == transpose::yes ? k : n;
  const float* ar = widen(buf.a32, buf.a, a, ta == transpose::yes ? k : m, a_cols, lda);
  const float* br = widen(buf.b32, buf.b, b, tb == transpose::yes ? n : k, b_cols, ldb);
  sgemm(ta, tb, m, n, k, alpha, ar, a_cols, br, b_cols, beta, c, ldc);
}

}  // namespace

std::uint16_t to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  if ((u & 0x7f800000u) == 0) return static_cast<std::uint16_t>((u >> 16) & 0x8000u);  // zero, subnormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN, quiet
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float from_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

void round_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) {
  std::int64_t i = 0;
  if (cpu_has_bf16()) round_avx512(dst, src, n, i);
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

std::string_view name_of(bf16_engine e) {
  return e == bf16_engine::onednn ? "oneDNN bf16 matmul (AVX512-BF16)" : "bf16-rounded operands on OpenBLAS (no AVX512-BF16)";
}

bf16_engine bf16_engine_in_use() { return onednn_offers_bf16() ? bf16_engine::onednn : bf16_engine::rounded_sgemm; }

void sgemm_bf16(bf16_engine e, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc) {
  TROUPE_CHECK(m >= 0 && n >= 0 && k >= 0, "sgemm_bf16: negative size");
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_result(c, m, n, ldc, beta);  // an empty sum: c = beta * c
  if (e == bf16_engine::onednn) {
    TROUPE_CHECK(onednn_offers_bf16(), "sgemm_bf16: this machine has no oneDNN bf16 matmul");
    return via_onednn(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  via_rounded_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemm_bf16(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc) {
  sgemm_bf16(bf16_engine_in_use(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace troupe
