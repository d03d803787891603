// cuDNN convolution plans cached by shape: the tensor, filter and convolution
// descriptors of one (batch, geometry, math mode) and the algorithms cuDNN's heuristics
// chose for forward, backward-data and backward-filter, with their workspace sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "gpu/handles.hpp"
#include "tensor/backend_abi.h"

namespace troupe::gpu {

struct conv_plan {
  tensor_desc x, y;
  filter_desc w;
  conv_desc conv;
  std::int64_t out_h = 0, out_w = 0;
  cudnnConvolutionFwdAlgo_t forward_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  std::size_t forward_workspace = 0, data_workspace = 0, filter_workspace = 0;
};

class conv_plan_cache {
 public:
  // The plan for this shape, built on first use. tf32 allows tensor-core math; otherwise
  // the algorithms use plain FP32 FMA, matching the CPU reference's precision.
  const conv_plan& get(cudnnHandle_t h, std::int64_t batch, const troupe_conv_geom& g, bool tf32);
  void clear() { plans_.clear(); }

 private:
  using key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t, std::int64_t, bool>;
  std::map<key, conv_plan> plans_;
};

}  // namespace troupe::gpu
