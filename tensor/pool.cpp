// maxpool2d forward/backward loops.
#include "tensor/pool.hpp"

#include <cstring>

namespace troupe {

void maxpool2d_forward(tensor_view out, tensor_view argmax, const_tensor_view in, const pool_geometry& g) {
  TROUPE_CHECK(g.valid(), "invalid pool geometry");
  TROUPE_CHECK(in.rank() == 4 && in.size(1) == g.channels && in.size(2) == g.in_h && in.size(3) == g.in_w,
               "maxpool input " + in.sizes().str());
  const std::int64_t planes = in.size(0) * g.channels, oh_n = g.out_h(), ow_n = g.out_w();
  TROUPE_CHECK(out.numel() == planes * oh_n * ow_n && argmax.numel() == out.numel(), "maxpool output size");
  const float* x = in.data<float>();
  float* y = out.data<float>();
  std::int32_t* am = argmax.data<std::int32_t>();
  for (std::int64_t pl = 0; pl < planes; ++pl, x += g.in_h * g.in_w)
    for (std::int64_t oh = 0; oh < oh_n; ++oh)
      for (std::int64_t ow = 0; ow < ow_n; ++ow, ++y, ++am) {
        const std::int64_t h0 = oh * g.stride, w0 = ow * g.stride;
        std::int64_t best = h0 * g.in_w + w0;
        float m = x[best];
        for (std::int64_t kh = 0; kh < g.kernel; ++kh)
          for (std::int64_t kw = 0; kw < g.kernel; ++kw) {
            const std::int64_t idx = (h0 + kh) * g.in_w + w0 + kw;
            if (x[idx] > m) {
              m = x[idx];
              best = idx;
            }
          }
        *y = m;
        *am = static_cast<std::int32_t>(best);
      }
}

void maxpool2d_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view argmax,
                        const pool_geometry& g) {
  TROUPE_CHECK(g.valid(), "invalid pool geometry");
  const std::int64_t plane_in = g.in_h * g.in_w, plane_out = g.out_h() * g.out_w();
  const std::int64_t planes = grad_in.numel() / plane_in;
  TROUPE_CHECK(grad_out.numel() == planes * plane_out && argmax.numel() == grad_out.numel(),
               "maxpool_backward sizes");
  float* dx = grad_in.data<float>();
  const float* dy = grad_out.data<float>();
  const std::int32_t* am = argmax.data<std::int32_t>();
  std::memset(dx, 0, sizeof(float) * grad_in.numel());
  for (std::int64_t pl = 0; pl < planes; ++pl, dx += plane_in)
    for (std::int64_t j = 0; j < plane_out; ++j, ++dy, ++am) dx[*am] += *dy;
}

}  // namespace troupe
