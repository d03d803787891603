// conv2d via per-image im2col and one OpenBLAS GEMM per image.
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
// copying. The values are the per-row loop's exactly.
TROUPE_VECTOR_CLONES void im2col_same_width(float* cols, const float* image, const conv_geometry& g) {
  const std::int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    const float* plane = image + c * g.in_h * g.in_w;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw, cols += oh_n * ow_n) {
        const col_range r = valid_cols(kw - g.pad, g.in_w, ow_n, 1);
        // Rows whose ih = oh - pad + kh lies in the image.
        const std::int64_t lo = std::clamp(g.pad - kh, std::int64_t{0}, oh_n);
        const std::int64_t hi = std::clamp(g.in_h + g.pad - kh, lo, oh_n);
        std::fill(cols, cols + lo * ow_n, 0.f);
        std::fill(cols + hi * ow_n, cols + oh_n * ow_n, 0.f);
        if (hi == lo || r.lo >= r.hi) {
          std::fill(cols + lo * ow_n, cols + hi * ow_n, 0.f);
          continue;
        }
        float* dst = cols + lo * ow_n;
        const float* src = plane + (lo - g.pad + kh) * g.in_w + kw - g.pad;
        const std::int64_t n = (hi - lo) * ow_n;
        // From the first row's first valid column to the last row's last one; between
        // them every element lies in the plane, the rows' edges taking a neighbouring
        // row's values, which the loop below replaces with zeros.
        std::memcpy(dst + r.lo, src + r.lo, sizeof(float) * (n - ow_n + r.hi - r.lo));
        for (std::int64_t row = 0; row < n; row += ow_n) {
          for (std::int64_t ow = 0; ow < r.lo; ++ow) dst[row + ow] = 0.f;
          for (std::int64_t ow = r.hi; ow < ow_n; ++ow) dst[row + ow] = 0.f;
        }
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

TROUPE_VECTOR_CLONES void col2im_add(float* image, const float* cols, const conv_geometry& g) {
  const std::int64_t oh_n = g.out_h(), ow_n = g.out_w();
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
  // The bias goes on each image's output while the product has it in cache, not in a
  // pass over the whole batch afterwards.
  for (std::int64_t i = 0; i < batch; ++i) {
    im2col(cols, x + i * in_stride, g);
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
  // Image by image, so each image's gradients are summed into the bias and its dx cleared
  // while they are in cache; the images are added in order, as one pass would.
  const const_tensor_view dy_planes = grad_out.reshape({batch, g.out_channels, p});
  for (std::int64_t i = 0; i < batch; ++i) {
    const float* dyi = dy + i * out_stride;
    im2col(cols, x + i * in_stride, g);
    // dW (C_out, K) += dY_i (C_out, P) * cols_i^T (P, K)
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
