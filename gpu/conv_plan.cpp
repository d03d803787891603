// Building cuDNN convolution plans: descriptors, then the first algorithm of each
// direction that cuDNN's heuristics rank as supported, with its workspace size.
#include "gpu/conv_plan.hpp"

namespace troupe::gpu {

namespace {

constexpr int max_algos = 16;

template <class Perf>
const Perf& first_supported(const Perf* perf, int count, const char* what) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) return perf[i];
  throw gpu_error(std::string("cuDNN offers no ") + what + " algorithm for this convolution");
}

}  // namespace

const conv_plan& conv_plan_cache::get(cudnnHandle_t h, std::int64_t batch, const troupe_conv_geom& g, bool tf32) {
  const key k{batch, g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h, g.kernel_w, g.stride, g.pad, tf32};
  if (auto it = plans_.find(k); it != plans_.end()) return it->second;

  conv_plan p;
  p.x = make_tensor_desc();
  p.y = make_tensor_desc();
  p.w = make_filter_desc();
  p.conv = make_conv_desc();
  const auto i = [](std::int64_t v) { return static_cast<int>(v); };
  TROUPE_GPU(cudnnSetTensor4dDescriptor(p.x.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(batch), i(g.in_channels),
                                        i(g.in_h), i(g.in_w)));
  TROUPE_GPU(cudnnSetFilter4dDescriptor(p.w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(g.out_channels),
                                        i(g.in_channels), i(g.kernel_h), i(g.kernel_w)));
  TROUPE_GPU(cudnnSetConvolution2dDescriptor(p.conv.get(), i(g.pad), i(g.pad), i(g.stride), i(g.stride), 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TROUPE_GPU(cudnnSetConvolutionMathType(p.conv.get(), tf32 ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION : CUDNN_FMA_MATH));
  int n = 0, c = 0, oh = 0, ow = 0;
  TROUPE_GPU(cudnnGetConvolution2dForwardOutputDim(p.conv.get(), p.x.get(), p.w.get(), &n, &c, &oh, &ow));
  p.out_h = oh;
  p.out_w = ow;
  TROUPE_GPU(cudnnSetTensor4dDescriptor(p.y.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, oh, ow));

  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[max_algos];
  TROUPE_GPU(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.get(), p.w.get(), p.conv.get(), p.y.get(), max_algos,
                                                    &found, fwd));
  p.forward_algo = first_supported(fwd, found, "forward").algo;
  TROUPE_GPU(cudnnGetConvolutionForwardWorkspaceSize(h, p.x.get(), p.w.get(), p.conv.get(), p.y.get(),
                                                     p.forward_algo, &p.forward_workspace));

  cudnnConvolutionBwdDataAlgoPerf_t bwd_data[max_algos];
  TROUPE_GPU(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w.get(), p.y.get(), p.conv.get(), p.x.get(), max_algos,
                                                         &found, bwd_data));
  p.data_algo = first_supported(bwd_data, found, "backward-data").algo;
  TROUPE_GPU(cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w.get(), p.y.get(), p.conv.get(), p.x.get(),
                                                          p.data_algo, &p.data_workspace));

  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[max_algos];
  TROUPE_GPU(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x.get(), p.y.get(), p.conv.get(), p.w.get(),
                                                           max_algos, &found, bwd_filter));
  p.filter_algo = first_supported(bwd_filter, found, "backward-filter").algo;
  TROUPE_GPU(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.get(), p.y.get(), p.conv.get(), p.w.get(),
                                                            p.filter_algo, &p.filter_workspace));
  return plans_.emplace(k, std::move(p)).first->second;
}

}  // namespace troupe::gpu
