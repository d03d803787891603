// Tests for the backend entries of the model's layers behind tensor/backend_abi.h (GELU,
// LayerNorm, embedding, causal attention, dropout, BatchNorm), in the harness of
// test_backend_ops.cpp: each entry on each backend (cpu, and cuda where a device exists)
// against the host op, and each backward against central finite differences of the same
// backend's forward. Without a CUDA device the cuda_* cases are skipped through a Boost
// precondition (ctest runs them as the gpu-labelled test and reports "Skipped").
#define BOOST_TEST_MODULE backend_layer_ops
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>

#include "tensor/attention.hpp"
#include "tensor/backend.hpp"
#include "tensor/batch_norm.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/embedding.hpp"
#include "tensor/layer_norm.hpp"
#include "tensor/ops.hpp"
#include "tests/support/backend_harness.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using namespace troupe::test;
namespace utf = boost::unit_test;

namespace {

// GELU and LayerNorm against the host ops (the same functors for GELU, whose erfcf differs
// by a few ulp between glibc and CUDA: 1e-6 relative; LayerNorm's row sums in another
// order: 1e-5), then layernorm(gelu(x)) backward against finite
// differences of the backend's own forward, for the input, gamma and beta.
void gelu_layer_norm_match(backend_context& b) {
  const std::int64_t rows = 6, cols = 37, n = rows * cols;
  tensor x = random_tensor({rows, cols}, 60), gamma = random_tensor({cols}, 61, 0.5f), beta = random_tensor({cols}, 62);
  tensor r = random_tensor({rows, cols}, 63);
  tensor want_a({rows, cols}), want_y({rows, cols}), want_ga({rows, cols}), want_gx({rows, cols});
  tensor want_gg = random_tensor({cols}, 64), want_gb = random_tensor({cols}, 65);
  tensor gg0 = want_gg, gb0 = want_gb;
  gelu_forward(want_a, x);
  layer_norm_forward(want_y, want_a, gamma, beta);
  layer_norm_backward(want_ga, want_gg, want_gb, r, want_a, gamma);
  gelu_backward(want_gx, want_ga, x);
  auto forward = [&]() {
    buffer dx(b, x), da(b, x.nbytes()), dy(b, x.nbytes()), dg(b, gamma), dbeta(b, beta);
    b.call("gelu_forward", &troupe_backend_v1::gelu_forward, da.f(), dx.f(), n);
    b.call("layer_norm_forward", &troupe_backend_v1::layer_norm_forward, dy.f(), da.f(), dg.f(), dbeta.f(), rows, cols,
           layer_norm_eps);
    return troupe::test::dot(dy.download({rows, cols}), r);
  };
  buffer dx(b, x), da(b, x.nbytes()), dy(b, x.nbytes()), dg(b, gamma), dbeta(b, beta), dr(b, r);
  buffer dga(b, x.nbytes()), dgx(b, x.nbytes()), dgg(b, gg0), dgb(b, gb0);
  b.call("gelu_forward", &troupe_backend_v1::gelu_forward, da.f(), dx.f(), n);
  b.call("layer_norm_forward", &troupe_backend_v1::layer_norm_forward, dy.f(), da.f(), dg.f(), dbeta.f(), rows, cols,
         layer_norm_eps);
  b.call("layer_norm_backward", &troupe_backend_v1::layer_norm_backward, dga.f(), dgg.f(), dgb.f(), dr.f(), da.f(),
         dg.f(), rows, cols, layer_norm_eps);
  b.call("gelu_backward", &troupe_backend_v1::gelu_backward, dgx.f(), dga.f(), dx.f(), n);
  expect_close(da.download({rows, cols}), want_a, 0, 1e-6, "gelu_forward");
  expect_close(dy.download({rows, cols}), want_y, 1e-5, 1e-5, "layer_norm_forward");
  expect_close(dgg.download({cols}), want_gg, 1e-5, 1e-5, "layer_norm_backward gamma");
  expect_close(dgb.download({cols}), want_gb, 1e-5, 1e-5, "layer_norm_backward beta");
  expect_close(dgx.download({rows, cols}), want_gx, 1e-5, 1e-5, "gelu_backward after layer_norm_backward");
  tensor grad_gamma = dgg.download({cols}), grad_beta = dgb.download({cols});
  for (std::int64_t c = 0; c < cols; ++c) {
    grad_gamma.data<float>()[c] -= gg0.data<float>()[c];
    grad_beta.data<float>()[c] -= gb0.data<float>()[c];
  }
  troupe::test::check_gradient(x, dgx.download({rows, cols}), forward, fd_eps, fd_abs, fd_rel);
  troupe::test::check_gradient(gamma, grad_gamma, forward, fd_eps, fd_abs, fd_rel);
  troupe::test::check_gradient(beta, grad_beta, forward, fd_eps, fd_abs, fd_rel);
}

// Embedding and causal attention against the host ops (the attention's GEMMs and row sums
// in another order: 1e-5), then attention backward against finite differences of the
// backend's own forward.
void embedding_attention_match(backend_context& b) {
  const std::int64_t batch = 2, t = 5, vocab = 7, heads = 2, d = 3, c = heads * d;
  const attention_geometry g{t, heads, d};
  tensor ids = troupe::test::vec({0, 6, 3, 3, 1, 2, 6, 0, 5, 4});
  ids.reshape({batch, t});
  tensor table = random_tensor({vocab, c}, 70), pos = random_tensor({t, c}, 71), r = random_tensor({batch, t, c}, 72);
  tensor want_e({batch, t, c}), want_gt = random_tensor({vocab, c}, 73), want_gp = random_tensor({t, c}, 74);
  tensor gt0 = want_gt, gp0 = want_gp;
  embedding_forward(want_e, ids, table, pos);
  embedding_backward(want_gt, want_gp, r, ids);
  buffer di(b, ids), dt(b, table), dp(b, pos), de(b, want_e.nbytes()), dr(b, r), dgt(b, gt0), dgp(b, gp0);
  b.call("embedding_forward", &troupe_backend_v1::embedding_forward, de.f(), di.f(), dt.f(), dp.f(), batch, t, vocab, c);
  b.call("embedding_backward", &troupe_backend_v1::embedding_backward, dgt.f(), dgp.f(), dr.f(), di.f(), batch, t,
         vocab, c);
  expect_close(de.download({batch, t, c}), want_e, 0, 1e-6, "embedding_forward");
  expect_close(dgt.download({vocab, c}), want_gt, 1e-6, 1e-5, "embedding_backward table");
  expect_close(dgp.download({t, c}), want_gp, 1e-6, 1e-5, "embedding_backward positions");

  tensor qkv = random_tensor({batch, t, 3 * c}, 75), probe = random_tensor({batch, t, c}, 76);
  tensor want_y({batch, t, c}), want_p({batch, heads, t, t}), want_gq({batch, t, 3 * c}), scratch(want_p.sizes());
  causal_attention_forward(want_y, want_p, qkv, g);
  causal_attention_backward(want_gq, scratch, probe, qkv, want_p, g);
  auto forward = [&]() {
    buffer dq(b, qkv), dy(b, want_y.nbytes()), dpr(b, want_p.nbytes());
    b.call("attention_forward", &troupe_backend_v1::attention_forward, dy.f(), dpr.f(), dq.f(), batch, t, heads, d);
    return troupe::test::dot(dy.download({batch, t, c}), probe);
  };
  buffer dq(b, qkv), dy(b, want_y.nbytes()), dpr(b, want_p.nbytes()), dgq(b, want_gq.nbytes()),
      dgs(b, want_p.nbytes()), dprobe(b, probe);
  b.call("attention_forward", &troupe_backend_v1::attention_forward, dy.f(), dpr.f(), dq.f(), batch, t, heads, d);
  b.call("attention_backward", &troupe_backend_v1::attention_backward, dgq.f(), dgs.f(), dprobe.f(), dq.f(), dpr.f(),
         batch, t, heads, d);
  expect_close(dy.download({batch, t, c}), want_y, 1e-5, 1e-5, "attention_forward");
  expect_close(dpr.download({batch, heads, t, t}), want_p, 1e-6, 1e-5, "attention_forward weights");
  expect_close(dgq.download({batch, t, 3 * c}), want_gq, 1e-5, 1e-5, "attention_backward");
  troupe::test::check_gradient(qkv, dgq.download({batch, t, 3 * c}), forward, fd_eps, fd_abs, fd_rel);
}

// Dropout: the backend's mask is the host's bit for bit (the same hash of key and index),
// and so are out = in * mask and the backward's grad_out * mask; another key draws
// another mask.
void dropout_matches(backend_context& b) {
  const std::int64_t n = 10007;
  const float p = 0.3f;
  const std::uint64_t key = 0x5eedULL;
  tensor x = random_tensor({n}, 70), dy = random_tensor({n}, 71);
  tensor want_y({n}), want_k({n}), want_dx({n});
  dropout_forward(want_y, want_k, x, p, key);
  dropout_backward(want_dx, dy, want_k);
  buffer dx(b, x), dout(b, x.nbytes()), dkept(b, x.nbytes()), ddy(b, dy), dgx(b, x.nbytes());
  b.call("dropout_forward", &troupe_backend_v1::dropout_forward, dout.f(), dkept.f(), dx.f(), n, p, key);
  b.call("dropout_backward", &troupe_backend_v1::dropout_backward, dgx.f(), ddy.f(), dkept.f(), n);
  expect_close(dkept.download({n}), want_k, 0, 0, "dropout_forward mask");
  expect_close(dout.download({n}), want_y, 0, 0, "dropout_forward");
  expect_close(dgx.download({n}), want_dx, 0, 0, "dropout_backward");
  b.call("dropout_forward", &troupe_backend_v1::dropout_forward, dout.f(), dkept.f(), dx.f(), n, p, key + 1);
  const tensor other = dkept.download({n});
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < n; ++i) differ += other.data<float>()[i] != want_k.data<float>()[i];
  BOOST_TEST(differ > n / 10);
}

// Batch normalisation: the entries against the host ops (sums in another order: 1e-5),
// and the backward against finite differences of the backend's own training forward.
void batch_norm_matches(backend_context& b) {
  const std::int64_t batch = 5, channels = 3, positions = 13;
  const shape xs{batch, channels, positions};
  tensor x = random_tensor(xs, 80, 2.f), gamma = random_tensor({channels}, 81), beta = random_tensor({channels}, 82);
  tensor r = random_tensor(xs, 83), population = vec({0.5f, -1.f, 0.f, 1.5f, 0.25f, 2.f});
  tensor want_y(xs), want_st({2 * channels}), want_z(xs), want_gx(xs), want_gg({channels}), want_gb({channels});
  batch_norm_forward(want_y, want_st, x, gamma, beta);
  batch_norm_inference(want_z, x, gamma, beta, population);
  batch_norm_backward(want_gx, want_gg, want_gb, r, x, gamma, want_st);
  buffer dx(b, x), dg(b, gamma), dbeta(b, beta), dpop(b, population), dr(b, r);
  buffer dy(b, x.nbytes()), dst(b, want_st.nbytes()), dz(b, x.nbytes()), dgx(b, x.nbytes());
  buffer dgg(b, tensor({channels})), dgb(b, tensor({channels}));
  b.call("batch_norm_forward", &troupe_backend_v1::batch_norm_forward, dy.f(), dst.f(), dx.f(), dg.f(), dbeta.f(),
         batch, channels, positions, batch_norm_eps);
  b.call("batch_norm_inference", &troupe_backend_v1::batch_norm_inference, dz.f(), dx.f(), dg.f(), dbeta.f(),
         dpop.f(), batch, channels, positions, batch_norm_eps);
  b.call("batch_norm_backward", &troupe_backend_v1::batch_norm_backward, dgx.f(), dgg.f(), dgb.f(), dr.f(), dx.f(),
         dg.f(), dst.f(), batch, channels, positions);
  expect_close(dy.download(xs), want_y, 1e-5, 1e-5, "batch_norm_forward");
  expect_close(dst.download({2 * channels}), want_st, 1e-5, 1e-5, "batch_norm_forward stats");
  expect_close(dz.download(xs), want_z, 0, 1e-6, "batch_norm_inference");
  expect_close(dgx.download(xs), want_gx, 1e-5, 1e-5, "batch_norm_backward input");
  expect_close(dgg.download({channels}), want_gg, 1e-5, 1e-5, "batch_norm_backward gamma");
  expect_close(dgb.download({channels}), want_gb, 1e-5, 1e-5, "batch_norm_backward beta");
  auto forward = [&]() {
    buffer fx(b, x), fg(b, gamma), fb(b, beta), fy(b, x.nbytes()), fst(b, want_st.nbytes());
    b.call("batch_norm_forward", &troupe_backend_v1::batch_norm_forward, fy.f(), fst.f(), fx.f(), fg.f(), fb.f(),
           batch, channels, positions, batch_norm_eps);
    return troupe::test::dot(fy.download(xs), r);
  };
  troupe::test::check_gradient(x, dgx.download(xs), forward, fd_eps, fd_abs, fd_rel);
  troupe::test::check_gradient(gamma, dgg.download({channels}), forward, fd_eps, fd_abs, fd_rel);
}

}  // namespace

TROUPE_BACKEND_CASE(gelu_layer_norm_match)
TROUPE_BACKEND_CASE(embedding_attention_match)
TROUPE_BACKEND_CASE(dropout_matches)
TROUPE_BACKEND_CASE(batch_norm_matches)
