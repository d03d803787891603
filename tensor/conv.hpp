// 2-D convolution on NCHW host tensors by im2col + GEMM, forward and backward.
// Weight layout (C_out, C_in, KH, KW), bias (C_out). The caller passes a workspace of
// conv2d_workspace_floats(g) floats, so nothing allocates per call.
#pragma once

#include <cstdint>

#include "tensor/gemm.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

struct conv_geometry {
  std::int64_t in_channels = 1, in_h = 1, in_w = 1;
  std::int64_t out_channels = 1, kernel_h = 1, kernel_w = 1;
  std::int64_t stride = 1, pad = 0;

  std::int64_t out_h() const { return (in_h + 2 * pad - kernel_h) / stride + 1; }
  std::int64_t out_w() const { return (in_w + 2 * pad - kernel_w) / stride + 1; }
  std::int64_t col_rows() const { return in_channels * kernel_h * kernel_w; }  // K of the GEMM
  std::int64_t col_cols() const { return out_h() * out_w(); }                 // positions P
  bool valid() const;
};

std::int64_t conv2d_workspace_floats(const conv_geometry& g);

// cols (K, P) <- the receptive fields of one image (C_in, H, W); zero where padding.
void im2col(float* cols, const float* image, const conv_geometry& g);
// image (C_in, H, W) += the columns scattered back (the adjoint of im2col). cols is
// scratch: the entries that fall outside the image may be set to zero.
void col2im_add(float* image, float* cols, const conv_geometry& g);

// out (B, C_out, OH, OW) = conv(in (B, C_in, H, W), weight) + bias. bias may be empty.
// p is the products' arithmetic (tensor/gemm.hpp), in both directions.
void conv2d_forward(tensor_view out, const_tensor_view in, const_tensor_view weight, const_tensor_view bias,
                    const conv_geometry& g, tensor_view workspace, precision p = precision::fp32);

// grad_weight += dL/dW, grad_bias += dL/db (accumulate, so microbatches can add up);
// grad_in = dL/dx (overwritten), skipped when grad_in is empty (the first layer needs none).
void conv2d_backward(tensor_view grad_in, tensor_view grad_weight, tensor_view grad_bias,
                     const_tensor_view grad_out, const_tensor_view in, const_tensor_view weight,
                     const conv_geometry& g, tensor_view workspace, precision p = precision::fp32);

}  // namespace troupe
