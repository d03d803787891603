// Tests for tensor/conv.cpp: forward against a direct 7-loop convolution across strides,
// paddings and odd sizes (tolerance 1e-4 of the magnitude), im2col/col2im as adjoints, and
// backward against central finite differences.
#define BOOST_TEST_MODULE conv
#include <boost/test/unit_test.hpp>

#include "tensor/conv.hpp"
#include "tensor/gemm_bf16.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

struct conv_case {
  std::int64_t batch, cin, h, w, cout, k, stride, pad;
};

std::vector<double> direct_conv(const tensor& x, const tensor& wt, const tensor& b, const conv_geometry& g,
                                std::int64_t batch) {
  const std::int64_t oh = g.out_h(), ow = g.out_w();
  std::vector<double> out(batch * g.out_channels * oh * ow);
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t co = 0; co < g.out_channels; ++co)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          double s = b.data<float>()[co];
          for (std::int64_t ci = 0; ci < g.in_channels; ++ci)
            for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
                const std::int64_t ih = i * g.stride - g.pad + kh, iw = j * g.stride - g.pad + kw;
                if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
                s += static_cast<double>(x.data<float>()[((n * g.in_channels + ci) * g.in_h + ih) * g.in_w + iw]) *
                     wt.data<float>()[((co * g.in_channels + ci) * g.kernel_h + kh) * g.kernel_w + kw];
              }
          out[((n * g.out_channels + co) * oh + i) * ow + j] = s;
        }
  return out;
}

const std::vector<conv_case> cases = {
    {2, 1, 5, 5, 3, 3, 1, 1}, {1, 2, 7, 6, 4, 3, 2, 1}, {3, 3, 8, 8, 2, 5, 1, 2},
    {1, 1, 4, 4, 1, 1, 1, 0}, {2, 2, 9, 7, 3, 3, 3, 0}, {1, 4, 6, 6, 5, 2, 2, 0},
    {2, 1, 11, 9, 3, 3, 1, 1},  // thin (Note [Thin convolutions]): 99 positions, a full block and a tail
    {2, 1, 7, 5, 10, 3, 1, 1},  // thin, 10 filters: the tiles of 8 and of 1 forward, of 4 x 4, 4 x 1, 1 x 1 back
};

// `cases` and three more for im2col's and col2im's two loops (Note [Same-width rows]).
std::vector<conv_case> cases_for_both_loops() {
  std::vector<conv_case> all = cases;
  all.push_back({1, 2, 6, 5, 1, 3, 1, 1});  // same width, taller than wide
  all.push_back({1, 1, 3, 7, 1, 5, 1, 2});  // same width, kernel taller than the image
  all.push_back({1, 2, 6, 6, 1, 3, 1, 0});  // stride 1, narrower output: the row loop
  return all;
}

// f(col, pixel) for every element of one image's columns, in the order (c, kh, kw, oh,
// ow): its index into the columns, and the index into the image (C, H, W) of the pixel
// it holds, or -1 where it lies in the padding.
template <class F>
void for_each_column_element(const conv_geometry& g, F f) {
  for (std::int64_t ci = 0; ci < g.in_channels; ++ci)
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw)
        for (std::int64_t oh = 0; oh < g.out_h(); ++oh)
          for (std::int64_t ow = 0; ow < g.out_w(); ++ow) {
            const std::int64_t ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
            const bool inside = ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
            const std::int64_t row = (ci * g.kernel_h + kh) * g.kernel_w + kw;
            f(row * g.col_cols() + oh * g.out_w() + ow, inside ? (ci * g.in_h + ih) * g.in_w + iw : std::int64_t{-1});
          }
}

conv_geometry geometry(const conv_case& c) { return {c.cin, c.h, c.w, c.cout, c.k, c.k, c.stride, c.pad}; }

std::string describe(const conv_case& c) {
  return "batch " + std::to_string(c.batch) + ", input (" + std::to_string(c.cin) + ", " + std::to_string(c.h) +
         ", " + std::to_string(c.w) + "), " + std::to_string(c.cout) + " filters " + std::to_string(c.k) +
         "x" + std::to_string(c.k) + ", stride " + std::to_string(c.stride) + ", pad " + std::to_string(c.pad);
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_matches_direct_convolution) {
  for (const conv_case& c : cases) BOOST_TEST_CONTEXT(describe(c)) {
  const conv_geometry g = geometry(c);
  tensor x = test::random_tensor({c.batch, c.cin, c.h, c.w}, 1);
  tensor wt = test::random_tensor({c.cout, c.cin, c.k, c.k}, 2);
  tensor b = test::random_tensor({c.cout}, 3);
  tensor y({c.batch, c.cout, g.out_h(), g.out_w()});
  tensor ws({conv2d_workspace_floats(g)});
  conv2d_forward(y, x, wt, b, g, ws);
  const auto ref = direct_conv(x, wt, b, g, c.batch);
  for (std::int64_t i = 0; i < y.numel(); ++i)
    BOOST_TEST(std::abs(y.data<float>()[i] - ref[i]) <= 1e-4 * (1.0 + std::abs(ref[i])));
  }
}

// Every element of the columns, from both im2col loops (Note [Same-width rows]: the
// cases of stride 1 whose output is as wide as the input take the other).
BOOST_AUTO_TEST_CASE(im2col_matches_the_definition) {
  for (const conv_case& c : cases_for_both_loops()) BOOST_TEST_CONTEXT(describe(c)) {
  const conv_geometry g = geometry(c);
  tensor x = test::random_tensor({c.cin, c.h, c.w}, 13);
  std::vector<float> cols(g.col_rows() * g.col_cols(), -7.f);
  im2col(cols.data(), x.data<float>(), g);
  std::int64_t wrong = 0;
  for_each_column_element(g, [&](std::int64_t col, std::int64_t pixel) {
    wrong += cols[col] != (pixel < 0 ? 0.f : x.data<float>()[pixel]);
  });
  BOOST_TEST(wrong == 0);
  }
}

// col2im against its definition, adding each element's terms in the order (c, kh, kw, oh,
// ow): both loops (the same-width one zeroes the outside columns of its scratch and adds
// whole runs) must give these sums bit for bit, on an image that starts non-zero.
BOOST_AUTO_TEST_CASE(col2im_matches_the_definition) {
  for (const conv_case& c : cases_for_both_loops()) BOOST_TEST_CONTEXT(describe(c)) {
  const conv_geometry g = geometry(c);
  const tensor cols = test::random_tensor({g.col_rows(), g.col_cols()}, 14);
  tensor want = test::random_tensor({c.cin, c.h, c.w}, 15), got(want.sizes()), scratch(cols.sizes());
  copy(got, want);
  copy(scratch, cols);
  col2im_add(got.data<float>(), scratch.data<float>(), g);
  for_each_column_element(g, [&](std::int64_t col, std::int64_t pixel) {
    if (pixel >= 0) want.data<float>()[pixel] += cols.data<float>()[col];
  });
  BOOST_TEST(test::same_bits(got, want));
  }
}

BOOST_AUTO_TEST_CASE(col2im_is_the_adjoint_of_im2col) {
  for (const conv_case& c : cases) BOOST_TEST_CONTEXT(describe(c)) {
  // <im2col(x), c> == <x, col2im(c)> for all x, c.
  const conv_geometry g = geometry(c);
  tensor x = test::random_tensor({c.cin, c.h, c.w}, 4);
  tensor cols({g.col_rows(), g.col_cols()});
  im2col(cols.data<float>(), x.data<float>(), g);
  tensor r = test::random_tensor({g.col_rows(), g.col_cols()}, 5);
  tensor back({c.cin, c.h, c.w});
  col2im_add(back.data<float>(), r.data<float>(), g);
  BOOST_TEST(test::dot(cols, r) == test::dot(x, back), boost::test_tools::tolerance(1e-5));
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
  for (const conv_case& c : cases) BOOST_TEST_CONTEXT(describe(c)) {
  const conv_geometry g = geometry(c);
  tensor x = test::random_tensor({c.batch, c.cin, c.h, c.w}, 6);
  tensor wt = test::random_tensor({c.cout, c.cin, c.k, c.k}, 7, 0.5f);
  tensor b = test::random_tensor({c.cout}, 8);
  tensor y({c.batch, c.cout, g.out_h(), g.out_w()});
  tensor r = test::random_tensor(y.sizes(), 9);  // probe: L = <conv(x), r>
  tensor ws({conv2d_workspace_floats(g)});
  auto loss = [&] {
    conv2d_forward(y, x, wt, b, g, ws);
    return test::dot(y, r);
  };
  tensor dx(x.sizes()), dw(wt.sizes()), db(b.sizes());
  conv2d_backward(dx, dw, db, r, x, wt, g, ws);
  // The loss is linear in each argument, so the central difference is exact up to rounding.
  test::check_gradient(x, dx, loss, 1e-2, 2e-3, 1e-3);
  test::check_gradient(wt, dw, loss, 1e-2, 2e-3, 1e-3);
  test::check_gradient(b, db, loss, 1e-2, 2e-3, 1e-3);
  }
}

BOOST_AUTO_TEST_CASE(backward_accumulates_parameter_gradients_and_skips_input_grad) {
  conv_geometry g{1, 4, 4, 2, 3, 3, 1, 1};
  tensor x = test::random_tensor({1, 1, 4, 4}, 10), wt = test::random_tensor({2, 1, 3, 3}, 11);
  tensor dy = test::random_tensor({1, 2, 4, 4}, 12), ws({conv2d_workspace_floats(g)});
  tensor dw1(wt.sizes()), db1({2}), dw2(wt.sizes()), db2({2});
  conv2d_backward(tensor_view(), dw1, db1, dy, x, wt, g, ws);
  conv2d_backward(tensor_view(), dw2, db2, dy, x, wt, g, ws);
  conv2d_backward(tensor_view(), dw2, db2, dy, x, wt, g, ws);
  for (std::int64_t i = 0; i < dw1.numel(); ++i) BOOST_TEST(dw2.data<float>()[i] == 2 * dw1.data<float>()[i]);
  for (std::int64_t i = 0; i < 2; ++i) BOOST_TEST(db2.data<float>()[i] == 2 * db1.data<float>()[i]);
}

// At precision::bf16 both directions multiply bf16-rounded operands: the result is the
// fp32 convolution of the rounded tensors, up to the order of the fp32 sums.
BOOST_AUTO_TEST_CASE(bf16_products_are_the_fp32_convolution_of_rounded_operands) {
  auto rounded = [](tensor t) {
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = from_bf16(to_bf16(t.data<float>()[i]));
    return t;
  };
  for (const conv_case& c : cases) BOOST_TEST_CONTEXT(describe(c)) {
    const conv_geometry g = geometry(c);
    const tensor x = test::random_tensor({c.batch, c.cin, c.h, c.w}, 1);
    const tensor wt = test::random_tensor({c.cout, c.cin, c.k, c.k}, 2), b = test::random_tensor({c.cout}, 3);
    const tensor dy = test::random_tensor({c.batch, c.cout, g.out_h(), g.out_w()}, 4);
    tensor ws({conv2d_workspace_floats(g)});
    tensor y16(dy.sizes()), y32(dy.sizes());
    conv2d_forward(y16, x, wt, b, g, ws, precision::bf16);
    conv2d_forward(y32, rounded(x), rounded(wt), b, g, ws);
    tensor dx16(x.sizes()), dw16(wt.sizes()), db16(b.sizes()), dx32(x.sizes()), dw32(wt.sizes()), db32(b.sizes());
    conv2d_backward(dx16, dw16, db16, dy, x, wt, g, ws, precision::bf16);
    conv2d_backward(dx32, dw32, db32, rounded(dy), rounded(x), rounded(wt), g, ws);
    BOOST_TEST(test::max_abs_diff(y16, y32) <= 1e-4f);
    BOOST_TEST(test::max_abs_diff(dx16, dx32) <= 1e-4f);
    BOOST_TEST(test::max_abs_diff(dw16, dw32) <= 1e-4f * static_cast<float>(c.batch * g.col_cols()));
    // ... and not the fp32 convolution of the operands as given; the bias gradient is no
    // product, so it stays the fp32 sum of dy.
    tensor y_exact(dy.sizes()), dx_exact(x.sizes()), dw_exact(wt.sizes()), db_exact(b.sizes());
    conv2d_forward(y_exact, x, wt, b, g, ws);
    conv2d_backward(dx_exact, dw_exact, db_exact, dy, x, wt, g, ws);
    BOOST_TEST(test::max_abs_diff(y16, y_exact) > 0.f);
    BOOST_TEST(test::same_bits(db16, db_exact));
  }
}

BOOST_AUTO_TEST_CASE(rejects_mismatched_input) {
  conv_geometry g{2, 5, 5, 3, 3, 3, 1, 1};
  tensor x({1, 1, 5, 5}), wt({3, 2, 3, 3}), b({3}), y({1, 3, 5, 5}), ws({conv2d_workspace_floats(g)});
  BOOST_CHECK_THROW(conv2d_forward(y, x, wt, b, g, ws), contract_error);
  tensor small({1});
  tensor x2({1, 2, 5, 5});
  BOOST_CHECK_THROW(conv2d_forward(y, x2, wt, b, g, small), contract_error);
}
