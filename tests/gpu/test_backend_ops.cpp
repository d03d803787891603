// Tests for every backend behind tensor/backend_abi.h, in the style of ggml's
// test-backend-ops, for the core ops (GEMM, elementwise, convolution, pooling, loss,
// optimizers, memory; the model's layers are test_backend_layer_ops.cpp's): each op runs
// on each backend (cpu, and cuda where a device exists) and is compared with the host
// reference in tensor/ (tolerances stated per op), and the backward ops are checked
// against central finite differences of the same backend's forward ops. Without a CUDA device the cuda_* cases are skipped through a Boost
// precondition (ctest runs them as the gpu-labelled test and reports "Skipped").
#define BOOST_TEST_MODULE backend_ops
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensor/backend.hpp"
#include "tensor/conv.hpp"
#include "tensor/gemm.hpp"
#include "tensor/loss.hpp"
#include "tensor/ops.hpp"
#include "tensor/pool.hpp"
#include "tensor/update_ops.hpp"
#include "tests/support/backend_harness.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
namespace utf = boost::unit_test;
using troupe::test::random_tensor;

namespace {

using namespace troupe::test;

// ---- the ops, each against the host reference ------------------------------------------

// gemm: all four transpose combinations, alpha and beta. FP32 (TF32 off): 1e-5 relative
// plus 1e-5 absolute per unit of k.
void gemm_matches(backend_context& b) {
  const std::int64_t m = 37, n = 29, k = 53;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      tensor a = random_tensor(ta ? shape{k, m} : shape{m, k}, 1), bm = random_tensor(tb ? shape{n, k} : shape{k, n}, 2);
      tensor c = random_tensor({m, n}, 3), want = c;
      sgemm(ta ? transpose::yes : transpose::no, tb ? transpose::yes : transpose::no, m, n, k, 0.7f, a.data<float>(),
            a.size(1), bm.data<float>(), bm.size(1), 0.3f, want.data<float>(), n);
      buffer da(b, a), db(b, bm), dc(b, c);
      b.call("gemm", &troupe_backend_v1::gemm, ta, tb, m, n, k, 0.7f, da.f(), a.size(1), db.f(), bm.size(1), 0.3f,
             dc.f(), n);
      expect_close(dc.download({m, n}), want, 1e-5 * k, 1e-5, "gemm");
    }
}

// Bias, ReLU, axpy, scale: the same float arithmetic per element, so 1e-6 relative; the
// bias gradient sums in another order, so 1e-5.
void elementwise_match(backend_context& b) {
  const std::int64_t batch = 5, channels = 7, positions = 11, n = batch * channels * positions;
  tensor x = random_tensor({batch, channels, positions}, 4), bias = random_tensor({channels}, 5);
  {
    tensor want = x;
    channel_bias_add(want, bias);
    buffer dx(b, x), dbias(b, bias);
    b.call("channel_bias_add", &troupe_backend_v1::channel_bias_add, dx.f(), dbias.f(), batch, channels, positions);
    expect_close(dx.download(x.sizes()), want, 0, 1e-6, "channel_bias_add");
  }
  {
    tensor rows = random_tensor({batch, channels}, 6), want = rows;
    bias_add(want, bias);
    buffer dr(b, rows), dbias(b, bias);
    b.call("bias_add", &troupe_backend_v1::bias_add, dr.f(), dbias.f(), batch, channels);
    expect_close(dr.download(rows.sizes()), want, 0, 1e-6, "bias_add");
  }
  {
    tensor gb = random_tensor({channels}, 7), want = gb;
    bias_grad_accumulate(want, x);
    buffer dgb(b, gb), dx(b, x);
    b.call("bias_grad", &troupe_backend_v1::bias_grad, dgb.f(), dx.f(), batch, channels, positions);
    expect_close(dgb.download(gb.sizes()), want, 1e-5, 1e-5, "bias_grad");
  }
  {
    tensor want({n}), dy = random_tensor({n}, 8), want_grad({n});
    relu_forward(want, x.view().reshape({n}));
    relu_backward(want_grad, dy, want);
    buffer dx(b, x), dout(b, n * sizeof(float)), ddy(b, dy), dgrad(b, n * sizeof(float));
    b.call("relu_forward", &troupe_backend_v1::relu_forward, dout.f(), dx.f(), n);
    b.call("relu_backward", &troupe_backend_v1::relu_backward, dgrad.f(), ddy.f(), dout.f(), n);
    expect_close(dout.download({n}), want, 0, 0, "relu_forward");
    expect_close(dgrad.download({n}), want_grad, 0, 0, "relu_backward");
  }
  {
    tensor y = random_tensor({n}, 9), want = y;
    axpy(want, -0.25f, x.view().reshape({n}));
    scale(want, 3.f);
    buffer dy(b, y), dx(b, x);
    b.call("axpy", &troupe_backend_v1::axpy, dy.f(), -0.25f, dx.f(), n);
    b.call("scale", &troupe_backend_v1::scale, dy.f(), 3.f, n);
    expect_close(dy.download({n}), want, 1e-6, 1e-6, "axpy and scale");
  }
}

troupe_conv_geom abi(const conv_geometry& g) {
  return {g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h, g.kernel_w, g.stride, g.pad};
}
troupe_pool_geom abi(const pool_geometry& g) { return {g.channels, g.in_h, g.in_w, g.kernel, g.stride}; }

// Convolution forward and backward, padded and strided: 1e-4 absolute and relative
// (the sums run in another order, over up to 45 terms).
void conv_matches(backend_context& b) {
  for (const conv_geometry g : {conv_geometry{3, 7, 9, 5, 3, 3, 1, 1}, conv_geometry{2, 8, 8, 4, 3, 3, 2, 0}}) {
    const std::int64_t batch = 4;
    const shape xs{batch, g.in_channels, g.in_h, g.in_w}, ys{batch, g.out_channels, g.out_h(), g.out_w()};
    tensor x = random_tensor(xs, 10), w = random_tensor({g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, 11);
    tensor bias = random_tensor({g.out_channels}, 12), dy = random_tensor(ys, 13);
    tensor gw = random_tensor(w.sizes(), 14), gb = random_tensor(bias.sizes(), 15);
    tensor ws({conv2d_workspace_floats(g)});
    tensor want_y(ys), want_gx(xs), want_gw = gw, want_gb = gb;
    conv2d_forward(want_y, x, w, bias, g, ws);
    conv2d_backward(want_gx, want_gw, want_gb, dy, x, w, g, ws);

    const troupe_conv_geom ag = abi(g);
    buffer dx(b, x), dw(b, w), dbias(b, bias), ddy(b, dy), dgw(b, gw), dgb(b, gb);
    buffer dout(b, want_y.nbytes()), dgx(b, want_gx.nbytes());
    b.call("conv2d_forward", &troupe_backend_v1::conv2d_forward, dout.f(), dx.f(), dw.f(), dbias.f(), batch, &ag);
    b.call("conv2d_backward", &troupe_backend_v1::conv2d_backward, dgx.f(), dgw.f(), dgb.f(), ddy.f(), dx.f(), dw.f(),
           batch, &ag);
    expect_close(dout.download(ys), want_y, 1e-4, 1e-4, "conv2d_forward");
    expect_close(dgx.download(xs), want_gx, 1e-4, 1e-4, "conv2d_backward input gradient");
    expect_close(dgw.download(w.sizes()), want_gw, 1e-4, 1e-4, "conv2d_backward weight gradient (accumulated)");
    expect_close(dgb.download(bias.sizes()), want_gb, 1e-4, 1e-4, "conv2d_backward bias gradient (accumulated)");
  }
}

// Max pooling: the same maxima and argmax (first maximum on ties) exactly; the backward
// pass of overlapping windows adds in another order, so 1e-6.
void maxpool_matches(backend_context& b) {
  for (const pool_geometry g : {pool_geometry{3, 8, 6, 2, 2}, pool_geometry{2, 7, 7, 3, 2}}) {
    const std::int64_t batch = 3;
    const shape xs{batch, g.channels, g.in_h, g.in_w}, ys{batch, g.channels, g.out_h(), g.out_w()};
    tensor x = random_tensor(xs, 16);
    x.data<float>()[1] = x.data<float>()[0];  // a tie inside the first window
    tensor dy = random_tensor(ys, 17), want_y(ys), want_arg(ys, dtype::i32), want_gx(xs);
    maxpool2d_forward(want_y, want_arg, x, g);
    maxpool2d_backward(want_gx, dy, want_arg, g);
    const troupe_pool_geom ag = abi(g);
    buffer dx(b, x), ddy(b, dy), dout(b, want_y.nbytes()), darg(b, want_arg.nbytes()), dgx(b, want_gx.nbytes());
    b.call("maxpool2d_forward", &troupe_backend_v1::maxpool2d_forward, dout.f(), darg.i(), dx.f(), batch, &ag);
    b.call("maxpool2d_backward", &troupe_backend_v1::maxpool2d_backward, dgx.f(), ddy.f(), darg.i(), batch, &ag);
    expect_close(dout.download(ys), want_y, 0, 0, "maxpool2d_forward");
    expect_equal_i32(darg.download(ys, dtype::i32), want_arg, "maxpool2d argmax");
    expect_close(dgx.download(xs), want_gx, 1e-6, 1e-6, "maxpool2d_backward");
  }
}

// Softmax cross-entropy: probabilities 1e-6, the mean loss 1e-5 relative, the gradient
// 1e-6; accuracy counts and finiteness exactly.
void loss_matches(backend_context& b) {
  const std::int64_t rows = 33, classes = 10;
  tensor logits = random_tensor({rows, classes}, 18, 3.f), labels = labels_tensor(rows, classes, 19);
  tensor want_p({rows, classes}), want_g({rows, classes});
  const double want_loss = softmax_xent_forward(want_p, logits, labels);
  softmax_xent_backward(want_g, want_p, labels, 1.f / 64);
  const std::int64_t want_correct = count_correct(logits, labels);

  buffer dl(b, logits), dlab(b, labels), dp(b, want_p.nbytes()), dg(b, want_g.nbytes());
  double loss = 0;
  std::int64_t correct = -1;
  b.call("softmax_xent_forward", &troupe_backend_v1::softmax_xent_forward, dp.f(), dl.f(), dlab.i(), rows, classes,
         &loss);
  b.call("softmax_xent_backward", &troupe_backend_v1::softmax_xent_backward, dg.f(), dp.f(), dlab.i(), rows, classes,
         1.f / 64);
  b.call("count_correct", &troupe_backend_v1::count_correct, dl.f(), dlab.i(), rows, classes, &correct);
  BOOST_TEST(loss == want_loss, boost::test_tools::tolerance(1e-5));
  expect_close(dp.download({rows, classes}), want_p, 1e-6, 1e-6, "softmax probabilities");
  expect_close(dg.download({rows, classes}), want_g, 1e-6, 1e-6, "softmax_xent_backward");
  BOOST_TEST(correct == want_correct);

  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    tensor x = random_tensor({1000}, 20);
    int finite = -1;
    {
      buffer dx(b, x);
      b.call("all_finite", &troupe_backend_v1::all_finite, dx.f(), std::int64_t{1000}, &finite);
      BOOST_TEST(finite == 1);
    }
    x.data<float>()[777] = bad;
    buffer dx(b, x);
    b.call("all_finite", &troupe_backend_v1::all_finite, dx.f(), std::int64_t{1000}, &finite);
    BOOST_TEST(finite == 0, "all_finite missed " << bad);
  }
}

// SGD (Nesterov, weight decay) and Adam, three steps: the shared functors, so 1e-6.
void optimizers_match(backend_context& b) {
  const std::int64_t n = 1000;
  tensor p = random_tensor({n}, 21), v({n}), m({n}), v2({n});
  tensor want_p = p, want_v = v, want_ap = p, want_m = m, want_v2 = v2;
  buffer dp(b, p), dv(b, v), dap(b, p), dm(b, m), dv2(b, v2);
  for (int step = 1; step <= 3; ++step) {
    tensor g = random_tensor({n}, 30 + step);
    buffer dg(b, g);
    const troupe_sgd_args s{0.1f, 0.9f, 5e-4f, 1};
    sgd_step(want_p, g, want_v, fn::sgd_momentum{s.lr, s.momentum, s.weight_decay, true});
    b.call("sgd_step", &troupe_backend_v1::sgd_step, dp.f(), dg.f(), dv.f(), n, &s);
    const troupe_adam_args a{1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f, 1.f - std::pow(0.9f, float(step)),
                             std::sqrt(1.f - std::pow(0.999f, float(step)))};
    adam_step(want_ap, g, want_m, want_v2, fn::adam{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.bias1, a.bias2_sqrt});
    b.call("adam_step", &troupe_backend_v1::adam_step, dap.f(), dg.f(), dm.f(), dv2.f(), n, &a);
  }
  expect_close(dp.download({n}), want_p, 1e-6, 1e-6, "sgd_step parameters");
  expect_close(dv.download({n}), want_v, 1e-6, 1e-6, "sgd_step velocity");
  expect_close(dap.download({n}), want_ap, 1e-6, 1e-6, "adam_step parameters");
  expect_close(dm.download({n}), want_m, 1e-6, 1e-6, "adam_step first moment");
}

// ---- finite differences through the backend's own forward ops (fd_eps, fd_abs, fd_rel
// in tests/support/backend_harness.hpp) -------------------------------------------------

void linear_gradients(backend_context& b) {
  const std::int64_t batch = 6, in = 9, out = 4;
  tensor x = random_tensor({batch, in}, 40), w = random_tensor({out, in}, 41), bias = random_tensor({out}, 42);
  tensor r = random_tensor({batch, out}, 43);
  auto forward = [&]() {
    buffer dx(b, x), dw(b, w), dbias(b, bias), dy(b, batch * out * sizeof(float));
    b.call("gemm", &troupe_backend_v1::gemm, 0, 1, batch, out, in, 1.f, dx.f(), in, dw.f(), in, 0.f, dy.f(), out);
    b.call("bias_add", &troupe_backend_v1::bias_add, dy.f(), dbias.f(), batch, out);
    return troupe::test::dot(dy.download({batch, out}), r);
  };
  buffer dx(b, x), dw(b, w), dr(b, r), dgw(b, tensor({out, in})), dgb(b, tensor({out})), dgx(b, tensor({batch, in}));
  b.call("gemm", &troupe_backend_v1::gemm, 1, 0, out, in, batch, 1.f, dr.f(), out, dx.f(), in, 1.f, dgw.f(), in);
  b.call("bias_grad", &troupe_backend_v1::bias_grad, dgb.f(), dr.f(), batch, out, std::int64_t{1});
  b.call("gemm", &troupe_backend_v1::gemm, 0, 0, batch, in, out, 1.f, dr.f(), out, dw.f(), in, 0.f, dgx.f(), in);
  troupe::test::check_gradient(w, dgw.download({out, in}), forward, fd_eps, fd_abs, fd_rel);
  troupe::test::check_gradient(bias, dgb.download({out}), forward, fd_eps, fd_abs, fd_rel);
  troupe::test::check_gradient(x, dgx.download({batch, in}), forward, fd_eps, fd_abs, fd_rel);
}

void conv_gradients(backend_context& b) {
  const conv_geometry g{2, 6, 5, 3, 3, 3, 1, 1};
  const troupe_conv_geom ag = abi(g);
  const std::int64_t batch = 2;
  const shape xs{batch, 2, 6, 5}, ys{batch, 3, g.out_h(), g.out_w()};
  tensor x = random_tensor(xs, 44), w = random_tensor({3, 2, 3, 3}, 45), bias = random_tensor({3}, 46);
  tensor r = random_tensor(ys, 47);
  auto forward = [&]() {
    buffer dx(b, x), dw(b, w), dbias(b, bias), dy(b, r.nbytes());
    b.call("conv2d_forward", &troupe_backend_v1::conv2d_forward, dy.f(), dx.f(), dw.f(), dbias.f(), batch, &ag);
    return troupe::test::dot(dy.download(ys), r);
  };
  buffer dx(b, x), dw(b, w), dr(b, r), dgw(b, tensor(w.sizes())), dgb(b, tensor({3})), dgx(b, tensor(xs));
  b.call("conv2d_backward", &troupe_backend_v1::conv2d_backward, dgx.f(), dgw.f(), dgb.f(), dr.f(), dx.f(), dw.f(),
         batch, &ag);
  troupe::test::check_gradient(w, dgw.download(w.sizes()), forward, fd_eps, fd_abs, fd_rel);
  troupe::test::check_gradient(bias, dgb.download({3}), forward, fd_eps, fd_abs, fd_rel);
  troupe::test::check_gradient(x, dgx.download(xs), forward, fd_eps, fd_abs, fd_rel);
}

void pool_relu_gradients(backend_context& b) {
  const pool_geometry g{2, 6, 6, 2, 2};
  const troupe_pool_geom ag = abi(g);
  const std::int64_t batch = 2, n = batch * 2 * 6 * 6;
  const shape xs{batch, 2, 6, 6}, ys{batch, 2, 3, 3};
  tensor x = random_tensor(xs, 48), r = random_tensor(ys, 49);
  auto forward = [&]() {  // maxpool(relu(x))
    buffer dx(b, x), da(b, x.nbytes()), dy(b, r.nbytes()), darg(b, r.numel() * sizeof(std::int32_t));
    b.call("relu_forward", &troupe_backend_v1::relu_forward, da.f(), dx.f(), n);
    b.call("maxpool2d_forward", &troupe_backend_v1::maxpool2d_forward, dy.f(), darg.i(), da.f(), batch, &ag);
    return troupe::test::dot(dy.download(ys), r);
  };
  buffer dx(b, x), da(b, x.nbytes()), dy(b, r.nbytes()), darg(b, r.numel() * sizeof(std::int32_t)), dr(b, r);
  buffer dga(b, x.nbytes()), dgx(b, x.nbytes());
  b.call("relu_forward", &troupe_backend_v1::relu_forward, da.f(), dx.f(), n);
  b.call("maxpool2d_forward", &troupe_backend_v1::maxpool2d_forward, dy.f(), darg.i(), da.f(), batch, &ag);
  b.call("maxpool2d_backward", &troupe_backend_v1::maxpool2d_backward, dga.f(), dr.f(), darg.i(), batch, &ag);
  b.call("relu_backward", &troupe_backend_v1::relu_backward, dgx.f(), dga.f(), da.f(), n);
  troupe::test::check_gradient(x, dgx.download(xs), forward, 1e-3, fd_abs, fd_rel);
}

void softmax_gradients(backend_context& b) {
  const std::int64_t rows = 5, classes = 7;
  tensor logits = random_tensor({rows, classes}, 50), labels = labels_tensor(rows, classes, 51);
  auto forward = [&]() {
    buffer dl(b, logits), dlab(b, labels), dp(b, logits.nbytes());
    double loss = 0;
    b.call("softmax_xent_forward", &troupe_backend_v1::softmax_xent_forward, dp.f(), dl.f(), dlab.i(), rows, classes,
           &loss);
    return loss;
  };
  buffer dl(b, logits), dlab(b, labels), dp(b, logits.nbytes()), dg(b, logits.nbytes());
  double loss = 0;
  b.call("softmax_xent_forward", &troupe_backend_v1::softmax_xent_forward, dp.f(), dl.f(), dlab.i(), rows, classes,
         &loss);
  b.call("softmax_xent_backward", &troupe_backend_v1::softmax_xent_backward, dg.f(), dp.f(), dlab.i(), rows, classes,
         1.f / rows);
  troupe::test::check_gradient(logits, dg.download({rows, classes}), forward, fd_eps, 1e-4, fd_rel);
}

// The allocator's statistics move as buffers come and go.
void memory_is_accounted(backend_context& b) {
  const troupe_memory_stats before = b.memory();
  { buffer x(b, 4096); }
  { buffer y(b, 4096); }
  const troupe_memory_stats after = b.memory();
  BOOST_TEST(after.allocations == before.allocations + 2);
  BOOST_TEST(after.device_mallocs >= before.device_mallocs);
}

}  // namespace

TROUPE_BACKEND_CASE(gemm_matches)
TROUPE_BACKEND_CASE(elementwise_match)
TROUPE_BACKEND_CASE(conv_matches)
TROUPE_BACKEND_CASE(maxpool_matches)
TROUPE_BACKEND_CASE(loss_matches)
TROUPE_BACKEND_CASE(optimizers_match)
TROUPE_BACKEND_CASE(linear_gradients)
TROUPE_BACKEND_CASE(conv_gradients)
TROUPE_BACKEND_CASE(pool_relu_gradients)
TROUPE_BACKEND_CASE(softmax_gradients)
TROUPE_BACKEND_CASE(memory_is_accounted)

// On a CUDA device, the module's reported caching reuses the first block.
BOOST_AUTO_TEST_CASE(cuda_allocator_reuses_blocks, *utf::precondition(cuda_usable)) {
  backend_context& b = *cuda().ctx;
  { buffer x(b, 1 << 20); }
  const troupe_memory_stats before = b.memory();
  { buffer y(b, 1 << 20); }
  BOOST_TEST(b.memory().cache_hits == before.cache_hits + 1);
  BOOST_TEST(b.memory().device_mallocs == before.device_mallocs);
}
