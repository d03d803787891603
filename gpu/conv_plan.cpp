// Building cuDNN convolution plans: descriptors, then the first algorithm of each
// direction that cuDNN's heuristics rank as supported, with its workspace size.
#include "gpu/conv_plan.hpp"

namespace troupe::gpu {

namespace {

constexpr int max_algos = 16;

// The first algorithm cuDNN's heuristics (`find`) rank as supported, and its workspace
// size (`size`).
template <class Perf, class Find, class Size>
auto choose(const char* what, Find find, Size size, std::size_t& workspace) {
  Perf perf[max_algos];
  int found = 0;
  TROUPE_GPU(find(max_algos, &found, perf));
  for (int i = 0; i < found; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      TROUPE_GPU(size(perf[i].algo, &workspace));
      return perf[i].algo;
    }
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

  const auto x = p.x.get(), y = p.y.get();
  const auto w = p.w.get();
  const auto conv = p.conv.get();
  p.forward_algo = choose<cudnnConvolutionFwdAlgoPerf_t>(
      "forward",
      [&](int count, int* f, auto* perf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, count, f, perf);
      },
      [&](auto algo, std::size_t* ws) { return cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, algo, ws); },
      p.forward_workspace);
  p.data_algo = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
      "backward-data",
      [&](int count, int* f, auto* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, y, conv, x, count, f, perf);
      },
      [&](auto algo, std::size_t* ws) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, conv, x, algo, ws);
      },
      p.data_workspace);
  p.filter_algo = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      "backward-filter",
      [&](int count, int* f, auto* perf) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, y, conv, w, count, f, perf);
      },
      [&](auto algo, std::size_t* ws) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, conv, w, algo, ws);
      },
      p.filter_workspace);
  return plans_.emplace(k, std::move(p)).first->second;
}

}  // namespace troupe::gpu
