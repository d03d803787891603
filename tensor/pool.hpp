// 2-D max pooling on NCHW host tensors, no padding. Forward records the argmax of each
// window (an index into the input plane) so backward routes each gradient to its winner.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace troupe {

struct pool_geometry {
  std::int64_t channels = 1, in_h = 1, in_w = 1, kernel = 2, stride = 2;
  std::int64_t out_h() const { return (in_h - kernel) / stride + 1; }
  std::int64_t out_w() const { return (in_w - kernel) / stride + 1; }
  bool valid() const { return channels > 0 && kernel > 0 && stride > 0 && in_h >= kernel && in_w >= kernel; }
};

// out (B, C, OH, OW) = window maxima of in (B, C, H, W); argmax (same shape as out, i32)
// holds h * W + w of each maximum (the first one on ties).
void maxpool2d_forward(tensor_view out, tensor_view argmax, const_tensor_view in, const pool_geometry& g);
// grad_in (B, C, H, W) = gradients routed back through argmax (overwritten).
void maxpool2d_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view argmax,
                        const pool_geometry& g);

}  // namespace troupe
