// onednn_matmul: oneDNN's matmul primitive behind one call. oneDNN's primitive cache
// keeps each shape's compiled kernel, so a repeated shape costs about a microsecond to
// set up; the strides of the memory descriptors express the transposes and leading
// dimensions, so nothing is copied; alpha is the output scale and beta the sum post-op.
// oneDNN runs on the calling thread's OpenMP team, set here to blas_threads() so that it
// splits the work as OpenBLAS would.
#include "tensor/onednn_matmul.hpp"

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "base/check.hpp"

namespace troupe {

namespace {

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::matmul::primitive_desc describe(matmul_operands t, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                                      std::int64_t k, float alpha, std::int64_t lda, std::int64_t ldb, float beta,
                                      std::int64_t ldc) {
  using dims = dnnl::memory::dims;
  const auto type = t == matmul_operands::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  const dnnl::memory::desc a({m, k}, type, ta == transpose::yes ? dims{1, lda} : dims{lda, 1});
  const dnnl::memory::desc b({k, n}, type, tb == transpose::yes ? dims{1, ldb} : dims{ldb, 1});
  const dnnl::memory::desc c({m, n}, dnnl::memory::data_type::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  if (beta != 0.f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine());
}

bool offered(matmul_operands t) {
  const bool cpu = t == matmul_operands::bf16
                       ? __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f")
                       : __builtin_cpu_supports("avx512f");
  if (!cpu) return false;
  try {
    (void)describe(t, transpose::no, transpose::no, 2, 2, 2, 1.f, 2, 2, 0.f, 2);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

bool onednn_offers(matmul_operands t) {
  static const bool f32 = offered(matmul_operands::f32), bf16 = offered(matmul_operands::bf16);
  return t == matmul_operands::bf16 ? bf16 : f32;
}

void onednn_matmul(matmul_operands t, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                   float alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc) {
  TROUPE_CHECK(m > 0 && n > 0 && k > 0, "onednn_matmul: empty product");
  const int threads = blas_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  try {
    const auto pd = describe(t, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
    const dnnl::matmul mm(pd);
    thread_local dnnl::stream stream(engine());
    dnnl::memory am(pd.src_desc(), engine(), const_cast<void*>(a));
    dnnl::memory bm(pd.weights_desc(), engine(), const_cast<void*>(b));
    dnnl::memory cm(pd.dst_desc(), engine(), c);
    mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  } catch (const dnnl::error& e) {
    TROUPE_CHECK(false, std::string("oneDNN's matmul failed: ") + e.what());
  }
}

}  // namespace troupe
