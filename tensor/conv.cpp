// conv2d via per-image im2col and one GEMM per image (direct loops for thin columns).
#include "tensor/conv.hpp"

#include <algorithm>
#include <cstring>

#include "tensor/gemm.hpp"
#include "tensor/ops.hpp"
#include "tensor/vector_clones.hpp"

namespace troupe {

bool conv_geometry::valid() const {
  return in_channels > 0 && in_h > 0 && in_w > 0 && out_channels > 0 && kernel_h > 0 && kernel_w > 0 && stride > 0 &&
         pad >= 0 && in_h + 2 * pad >= kernel_h && in_w + 2 * pad >= kernel_w;
}

std::int64_t conv2d_workspace_floats(const conv_geometry& g) { return 2 * g.col_rows() * g.col_cols(); }

// Note [im2col row ranges]
// For output column ow the input column is iw = ow * stride - pad + kw. Instead of testing
// 0 <= iw < W per element, each row computes the first and last ow whose iw is in range,
// zero-fills outside it and copies (or strides through) inside it.
namespace {

struct col_range {
  std::int64_t lo, hi;  // valid ow in [lo, hi)
};

col_range valid_cols(std::int64_t offset, std::int64_t in_w, std::int64_t out_w, std::int64_t stride) {
  // iw = ow * stride + offset must satisfy 0 <= iw < in_w.
  std::int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  std::int64_t hi = in_w - offset <= 0 ? 0 : (in_w - offset + stride - 1) / stride;
  lo = std::min(lo, out_w);
  hi = std::clamp(hi, lo, out_w);
  return {lo, hi};
}

// Note [Same-width rows]
// With stride 1 and an output as wide as the input (a 'same' convolution: 2 * pad =
// kernel - 1, every convolution of the cnn and the resnet), the rows one (c, kh, kw)
// takes from the image are one run of the plane, shifted by kw - pad. So they are copied
// at once, and then the columns that fall outside the image on either side (at most pad
// a row) are set to zero; row by row, a call per 7 to 28 floats costs more than the
// copying. The values are the per-row loop's exactly. col2im runs the other way: the
// outside columns of its scratch are zeroed, then each run is added at once (rows of 7
// to 28 floats are shorter than a vector; the CNN's step went from 4,636 to 4,766
// samples/s, medians of 3 interleaved runs).

// The part of one (c, kh, kw)'s rows that lies in the image: output rows [lo, hi) (those
// whose ih = oh - pad + kh is in the image), columns r, and where row lo's column 0 falls
// in the plane (`offset`, possibly just before a row's start). This helper and the next
// are inlined into the vector clones below, which called them out of line otherwise (2%
// of the CNN's step).
struct same_width_run {
  col_range r;
  std::int64_t lo, hi, offset;
  bool empty() const { return hi == lo || r.lo >= r.hi; }
};

[[gnu::always_inline]] inline same_width_run same_width_run_of(const conv_geometry& g, std::int64_t kh,
                                                              std::int64_t kw) {
  const std::int64_t oh_n = g.out_h();
  const std::int64_t lo = std::clamp(g.pad - kh, std::int64_t{0}, oh_n);
  const std::int64_t hi = std::clamp(g.in_h + g.pad - kh, lo, oh_n);
  return {valid_cols(kw - g.pad, g.in_w, g.out_w(), 1), lo, hi, (lo - g.pad + kh) * g.in_w + kw - g.pad};
}

// Zeroes the columns outside r in each of the n / width rows at `rows`.
[[gnu::always_inline]] inline void zero_outside_columns(float* rows, std::int64_t n, std::int64_t width,
                                                       col_range r) {
  for (std::int64_t row = 0; row < n; row += width) {
    for (std::int64_t ow = 0; ow < r.lo; ++ow) rows[row + ow] = 0.f;
    for (std::int64_t ow = r.hi; ow < width; ++ow) rows[row + ow] = 0.f;
  }
}

TROUPE_VECTOR_CLONES void im2col_same_width(float* cols, const float* image, const conv_geometry& g) {
  const std::int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    const float* plane = image + c * g.in_h * g.in_w;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw, cols += oh_n * ow_n) {
        const same_width_run run = same_width_run_of(g, kh, kw);
        std::fill(cols, cols + run.lo * ow_n, 0.f);
        std::fill(cols + run.hi * ow_n, cols + oh_n * ow_n, 0.f);
        if (run.empty()) {
          std::fill(cols + run.lo * ow_n, cols + run.hi * ow_n, 0.f);
          continue;
        }
        float* dst = cols + run.lo * ow_n;
        const float* src = plane + run.offset;
        const std::int64_t n = (run.hi - run.lo) * ow_n;
        // From the first row's first valid column to the last row's last one; between
        // them every element lies in the plane, the rows' edges taking a neighbouring
        // row's values, which are then replaced with zeros.
        std::memcpy(dst + run.r.lo, src + run.r.lo, sizeof(float) * (n - ow_n + run.r.hi - run.r.lo));
        zero_outside_columns(dst, n, ow_n, run.r);
      }
  }
}

// The adjoint of im2col_same_width (Note [Same-width rows]): each (c, kh, kw)'s rows are
// added to the plane as one run, after the columns outside the image are set to zero in
// `cols`, so the run adds zero where it wraps onto a neighbouring row's edge. Every
// element of the plane gets its terms in the per-row loop's order, so the sums are that
// loop's bit for bit.
TROUPE_VECTOR_CLONES void col2im_add_same_width(float* image, float* cols, const conv_geometry& g) {
  const std::int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    float* plane = image + c * g.in_h * g.in_w;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw, cols += oh_n * ow_n) {
        const same_width_run run = same_width_run_of(g, kh, kw);
        if (run.empty()) continue;
        float* src = cols + run.lo * ow_n;
        const std::int64_t n = (run.hi - run.lo) * ow_n;
        zero_outside_columns(src, n, ow_n, run.r);
        float* dst = plane + run.offset;
        const std::int64_t end = n - ow_n + run.r.hi;  // the last row's last column in the image
        for (std::int64_t i = run.r.lo; i < end; ++i) dst[i] += src[i];
      }
  }
}

}  // namespace

TROUPE_VECTOR_CLONES void im2col(float* cols, const float* image, const conv_geometry& g) {
  const std::int64_t oh_n = g.out_h(), ow_n = g.out_w();
  if (g.stride == 1 && ow_n == g.in_w) return im2col_same_width(cols, image, g);
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    const float* plane = image + c * g.in_h * g.in_w;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const col_range r = valid_cols(kw - g.pad, g.in_w, ow_n, g.stride);
        for (std::int64_t oh = 0; oh < oh_n; ++oh, cols += ow_n) {
          const std::int64_t ih = oh * g.stride - g.pad + kh;
          if (ih < 0 || ih >= g.in_h) {
            std::memset(cols, 0, sizeof(float) * ow_n);
            continue;
          }
          const float* src = plane + ih * g.in_w + kw - g.pad;
          std::fill(cols, cols + r.lo, 0.f);
          if (g.stride == 1) {
            std::memcpy(cols + r.lo, src + r.lo, sizeof(float) * (r.hi - r.lo));
          } else {
            for (std::int64_t ow = r.lo; ow < r.hi; ++ow) cols[ow] = src[ow * g.stride];
          }
          std::fill(cols + r.hi, cols + ow_n, 0.f);
        }
      }
  }
}

TROUPE_VECTOR_CLONES void col2im_add(float* image, float* cols, const conv_geometry& g) {
  const std::int64_t oh_n = g.out_h(), ow_n = g.out_w();
  if (g.stride == 1 && ow_n == g.in_w) return col2im_add_same_width(image, cols, g);
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    float* plane = image + c * g.in_h * g.in_w;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const col_range r = valid_cols(kw - g.pad, g.in_w, ow_n, g.stride);
        for (std::int64_t oh = 0; oh < oh_n; ++oh, cols += ow_n) {
          const std::int64_t ih = oh * g.stride - g.pad + kh;
          if (ih < 0 || ih >= g.in_h) continue;
          float* dst = plane + ih * g.in_w + kw - g.pad;
          if (g.stride == 1) {  // a loop of its own, so it vectorises
            for (std::int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow] += cols[ow];
          } else {
            for (std::int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow * g.stride] += cols[ow];
          }
        }
      }
  }
}

namespace {

// Note [Thin convolutions]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A convolution whose columns have few rows, as an image model's first layer (one channel
// and a 3x3 kernel: K = 9), is a thin product: a GEMM library packs both operands and
// clears the output for 9 multiply-adds an element, which cost more than the products
// (OpenBLAS's share of the CNN's one-thread step was 10%, nearly all of it conv1). Up
// to thin_conv_rows rows, fp32 runs the forward product and the weight gradient as direct
// loops over tiles held in vector registers: 8 output channels x 16 positions, each
// output starting at its bias and adding its K products in order of k; 4 x 4 weight-
// gradient entries, each the dot product of an output-gradient plane and a column row in
// 16 partial sums added in order. Both orders are fixed, so runs stay reproducible; the
// input gradient (never needed by a first layer) stays a GEMM. The CNN's one-thread step
// went from 4,307 to 4,541 samples/s (medians of 3 interleaved runs, 2026-11-29).
constexpr std::int64_t thin_conv_rows = 16;

// Sixteen floats (one AVX-512 register; two or four in the narrower clones). The tiles
// below hold their sums in these, which the compiler's own vectorising did not (it chose
// 256-bit registers and shuffles, and ran the CNN's step 15% slower than OpenBLAS).
using f32x16 = float __attribute__((vector_size(64)));
constexpr std::int64_t thin_lanes = 16;

// v = the 16 floats at `from`, or with n < 16 the first n and zeros (a block's tail). An
// out-parameter: a 64-byte vector returned by value would change the baseline clone's ABI.
[[gnu::always_inline]] inline void load_lanes(f32x16& v, const float* from, std::int64_t n) {
  v = f32x16{};
  if (n == thin_lanes)
    std::memcpy(&v, from, sizeof v);
  else
    std::memcpy(&v, from, sizeof(float) * n);
}

// Outputs [0, CO) (planes p apart) at positions [p0, p0 + n), n <= 16 (16 when Full):
// each starts at its bias and adds its k products in order of k.
template <int CO, bool Full>
[[gnu::always_inline]] inline void thin_forward_tile(float* y, const float* w, const float* bias, const float* cols,
                                                    std::int64_t k, std::int64_t p, std::int64_t p0, std::int64_t n) {
  if (Full) n = thin_lanes;
  f32x16 acc[CO];
  for (int c = 0; c < CO; ++c) acc[c] = f32x16{} + (bias ? bias[c] : 0.f);
  for (std::int64_t r = 0; r < k; ++r) {
    f32x16 row;
    load_lanes(row, cols + r * p + p0, n);
    for (int c = 0; c < CO; ++c) acc[c] += w[c * k + r] * row;
  }
  for (int c = 0; c < CO; ++c)
    if (Full)
      std::memcpy(y + c * p + p0, &acc[c], sizeof acc[c]);
    else
      std::memcpy(y + c * p + p0, &acc[c], sizeof(float) * n);
}

// Output channels [0, CO) of y (C_out, P) = w (C_out, K) cols (K, P) + bias.
template <int CO>
[[gnu::always_inline]] inline void thin_forward_rows(float* y, const float* w, const float* bias, const float* cols,
                                                    std::int64_t k, std::int64_t p) {
  std::int64_t p0 = 0;
  for (; p0 + thin_lanes <= p; p0 += thin_lanes) thin_forward_tile<CO, true>(y, w, bias, cols, k, p, p0, thin_lanes);
  if (p0 < p) thin_forward_tile<CO, false>(y, w, bias, cols, k, p, p0, p - p0);
}

// y (C_out, P) = w (C_out, K) cols (K, P) + bias, eight output channels at a time.
TROUPE_VECTOR_CLONES void thin_conv_forward(float* y, const float* w, const float* bias, const float* cols,
                                            std::int64_t c_out, std::int64_t k, std::int64_t p) {
  std::int64_t co = 0;
  for (; co + 8 <= c_out; co += 8) thin_forward_rows<8>(y + co * p, w + co * k, bias ? bias + co : nullptr, cols, k, p);
  for (; co < c_out; ++co) thin_forward_rows<1>(y + co * p, w + co * k, bias ? bias + co : nullptr, cols, k, p);
}

// dw[c][r] for c < CO, r < R (rows of dw k apart) += the dot products of dy's planes and
// cols' rows: 16 partial sums over the positions (the last block zero-padded), added in
// order.
template <int CO, int R>
[[gnu::always_inline]] inline void thin_grad_tile(float* dw, const float* dy, const float* cols, std::int64_t k,
                                                 std::int64_t p) {
  f32x16 acc[CO][R] = {};
  const auto add_block = [&](std::int64_t i, std::int64_t n) [[gnu::always_inline]] {
    f32x16 rows[R];
    for (int r = 0; r < R; ++r) load_lanes(rows[r], cols + r * p + i, n);
    for (int c = 0; c < CO; ++c) {
      f32x16 d;
      load_lanes(d, dy + c * p + i, n);
      for (int r = 0; r < R; ++r) acc[c][r] += d * rows[r];
    }
  };
  std::int64_t i = 0;
  for (; i + thin_lanes <= p; i += thin_lanes) add_block(i, thin_lanes);
  if (i < p) add_block(i, p - i);
  for (int c = 0; c < CO; ++c)
    for (int r = 0; r < R; ++r) {
      float s = 0.f;
      for (std::int64_t l = 0; l < thin_lanes; ++l) s += acc[c][r][l];
      dw[c * k + r] += s;
    }
}

// dw (C_out, K) += dy (C_out, P) cols^T (P, K), in tiles of 4 x 4 entries.
TROUPE_VECTOR_CLONES void thin_conv_weight_grad(float* dw, const float* dy, const float* cols, std::int64_t c_out,
                                                std::int64_t k, std::int64_t p) {
  for (std::int64_t co = 0; co < c_out;) {
    const bool four = c_out - co >= 4;
    for (std::int64_t r = 0; r < k;) {
      const bool tile = four && k - r >= 4;
      float* d = dw + co * k + r;
      if (tile)
        thin_grad_tile<4, 4>(d, dy + co * p, cols + r * p, k, p);
      else if (four)
        thin_grad_tile<4, 1>(d, dy + co * p, cols + r * p, k, p);
      else
        thin_grad_tile<1, 1>(d, dy + co * p, cols + r * p, k, p);
      r += tile ? 4 : 1;
    }
    co += four ? 4 : 1;
  }
}

void check_conv_args(const_tensor_view in, const_tensor_view weight, const conv_geometry& g,
                     const_tensor_view workspace) {
  TROUPE_CHECK(g.valid(), "invalid conv geometry");
  TROUPE_CHECK(in.rank() == 4 && in.size(1) == g.in_channels && in.size(2) == g.in_h && in.size(3) == g.in_w,
               "conv2d input " + in.sizes().str() + " does not match the geometry");
  TROUPE_CHECK(weight.numel() == g.out_channels * g.col_rows(), "conv2d weight " + weight.sizes().str());
  TROUPE_CHECK(workspace.numel() >= conv2d_workspace_floats(g), "conv2d workspace too small");
}

}  // namespace

void conv2d_forward(tensor_view out, const_tensor_view in, const_tensor_view weight, const_tensor_view bias,
                    const conv_geometry& g, tensor_view workspace, precision prec) {
  check_conv_args(in, weight, g, workspace);
  const std::int64_t batch = in.size(0), k = g.col_rows(), p = g.col_cols();
  TROUPE_CHECK(out.rank() == 4 && out.size(0) == batch && out.size(1) == g.out_channels && out.size(2) == g.out_h() &&
                   out.size(3) == g.out_w(),
               "conv2d output " + out.sizes().str());
  float* cols = workspace.data<float>();
  const float* x = in.data<float>();
  float* y = out.data<float>();
  const float* w = weight.data<float>();
  const std::int64_t in_stride = g.in_channels * g.in_h * g.in_w, out_stride = g.out_channels * p;
  TROUPE_CHECK(bias.empty() || bias.numel() == g.out_channels, "conv2d bias " + bias.sizes().str());
  const bool thin = k <= thin_conv_rows && prec == precision::fp32;  // Note [Thin convolutions]
  // The bias goes on each image's output while the product has it in cache, not in a
  // pass over the whole batch afterwards.
  for (std::int64_t i = 0; i < batch; ++i) {
    im2col(cols, x + i * in_stride, g);
    if (thin) {
      thin_conv_forward(y + i * out_stride, w, bias.empty() ? nullptr : bias.data<float>(), cols, g.out_channels, k, p);
      continue;
    }
    sgemm(transpose::no, transpose::no, g.out_channels, p, k, 1.f, w, k, cols, p, 0.f, y + i * out_stride, p, prec);
    if (!bias.empty()) channel_bias_add(out.slice(i, i + 1), bias);
  }
}

void conv2d_backward(tensor_view grad_in, tensor_view grad_weight, tensor_view grad_bias, const_tensor_view grad_out,
                     const_tensor_view in, const_tensor_view weight, const conv_geometry& g, tensor_view workspace,
                     precision prec) {
  check_conv_args(in, weight, g, workspace);
  const std::int64_t batch = in.size(0), k = g.col_rows(), p = g.col_cols();
  TROUPE_CHECK(grad_out.numel() == batch * g.out_channels * p, "conv2d grad_out " + grad_out.sizes().str());
  TROUPE_CHECK(grad_weight.numel() == weight.numel(), "conv2d grad_weight " + grad_weight.sizes().str());
  float* cols = workspace.data<float>();
  float* dcols = cols + k * p;
  const float* x = in.data<float>();
  const float* dy = grad_out.data<float>();
  const float* w = weight.data<float>();
  float* dw = grad_weight.data<float>();
  float* dx = grad_in.empty() ? nullptr : grad_in.data<float>();
  const std::int64_t in_stride = g.in_channels * g.in_h * g.in_w, out_stride = g.out_channels * p;
  const bool thin = k <= thin_conv_rows && prec == precision::fp32;  // Note [Thin convolutions]
  // Image by image, so each image's gradients are summed into the bias and its dx cleared
  // while they are in cache; the images are added in order, as one pass would.
  const const_tensor_view dy_planes = grad_out.reshape({batch, g.out_channels, p});
  for (std::int64_t i = 0; i < batch; ++i) {
    const float* dyi = dy + i * out_stride;
    im2col(cols, x + i * in_stride, g);
    // dW (C_out, K) += dY_i (C_out, P) * cols_i^T (P, K)
    if (thin)
      thin_conv_weight_grad(dw, dyi, cols, g.out_channels, k, p);
    else
      sgemm(transpose::no, transpose::yes, g.out_channels, k, p, 1.f, dyi, p, cols, p, 1.f, dw, k, prec);
    if (!grad_bias.empty()) bias_grad_accumulate(grad_bias, dy_planes.slice(i, i + 1));
    if (dx) {
      // dcols (K, P) = W^T (K, C_out) * dY_i (C_out, P)
      sgemm(transpose::yes, transpose::no, k, p, g.out_channels, 1.f, w, k, dyi, p, 0.f, dcols, p, prec);
      std::memset(dx + i * in_stride, 0, sizeof(float) * in_stride);
      col2im_add(dx + i * in_stride, dcols, g);
    }
  }
}

}  // namespace troupe
