// Elementwise math and optimizer updates, written once as functors that compile for the
// host and, under nvcc, for the device. The CPU loops in tensor/ and the CUDA kernels in
// gpu/ both call these, so the CPU tests check the exact arithmetic the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TROUPE_HD __host__ __device__ __forceinline__
#else
#define TROUPE_HD inline
#endif

namespace troupe::fn {

struct relu {
  TROUPE_HD float operator()(float x) const { return x > 0.f ? x : 0.f; }
};

// Gradient of ReLU given its output y and the output gradient dy.
struct relu_grad {
  TROUPE_HD float operator()(float y, float dy) const { return y > 0.f ? dy : 0.f; }
};

// GELU, the exact form x * Phi(x) (PyTorch's nn.GELU()), Phi the standard normal CDF.
// Phi(x) is 0.5 erfc(-x / sqrt 2): 0.5 (1 + erf(x / sqrt 2)) cancels for negative x (erf near
// -1), which lost half the digits of GELU's small outputs there (x = -5: about 10%) and
// made the host's and the device's erff disagree far beyond their few ulp.
struct gelu {
  TROUPE_HD float operator()(float x) const { return 0.5f * x * erfcf(x * -0.70710678118654752f); }
};

// Gradient of GELU given its input x and the output gradient dy: dy * (Phi(x) + x phi(x)).
struct gelu_grad {
  TROUPE_HD float operator()(float x, float dy) const {
    const float cdf = 0.5f * erfcf(x * -0.70710678118654752f);
    const float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};

// Note [Dropout masks]
// Inverted dropout, PyTorch's: element i of a mask keyed by `key` keeps its input with
// probability 1 - p, scaled by 1 / (1 - p), else drops it (0). The draw is a
// counter-based hash of (key, i) (splitmix64's finaliser), with no generator state: an
// element's draw does not depend on the order elements are computed in, the host and the
// CUDA kernels draw the same mask bit for bit, and a microbatch's mask depends only on
// its key (Note [Dropout seeds] in train/layer.hpp).
struct dropout_scale {
  std::uint64_t key;
  float p, keep_scale;  // keep_scale = 1 / (1 - p)
  TROUPE_HD float operator()(std::int64_t i) const {
    std::uint64_t z = key + (static_cast<std::uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.f / 16777216.f);  // 24 bits: [0, 1)
    return u < p ? 0.f : keep_scale;
  }
};

// Normalises a raw pixel: (x / 255 - mean) / std.
struct normalize_pixel {
  float mean, inv_std;
  TROUPE_HD float operator()(unsigned char x) const { return (x * (1.f / 255.f) - mean) * inv_std; }
};

// SGD with momentum and L2 weight decay, PyTorch semantics:
//   g += wd * p;  v = mu * v + g;  p -= lr * (nesterov ? g + mu * v : v)
// With mu == 0 the velocity is still written (it then equals g) so the state stays defined.
struct sgd_momentum {
  float lr, momentum, weight_decay;
  bool nesterov;
  TROUPE_HD void operator()(float& p, float g, float& v) const {
    g += weight_decay * p;
    v = momentum * v + g;
    p -= lr * (nesterov ? g + momentum * v : v);
  }
};

// SGD with one member's own velocity v and the parameters stored one velocity ahead (Note
// [Momentum per member] in core/member_momenta.hpp):
//   g += wd * p;  v' = mu * v + g;  p -= lr * (2 v' - v);  v = v'
struct sgd_member_momentum {
  float lr, momentum, weight_decay;
  TROUPE_HD void operator()(float& p, float g, float& v) const {
    g += weight_decay * p;
    const float next = momentum * v + g;
    p -= lr * (2.f * next - v);
    v = next;
  }
};

// Adam with L2 weight decay, PyTorch semantics. bias1 = 1 - beta1^t, bias2_sqrt = sqrt(1 - beta2^t)
// are computed once per step by the caller.
struct adam {
  float lr, beta1, beta2, eps, weight_decay, bias1, bias2_sqrt;
  TROUPE_HD void operator()(float& p, float g, float& m, float& v) const {
    g += weight_decay * p;
    m = beta1 * m + (1.f - beta1) * g;
    v = beta2 * v + (1.f - beta2) * g * g;
    p -= (lr / bias1) * m / (sqrtf(v) / bias2_sqrt + eps);
  }
};

}  // namespace troupe::fn
