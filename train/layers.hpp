// The concrete layers: Linear, Conv2d, MaxPool2d, ReLU, GELU, Dropout, BatchNorm, LayerNorm, Flatten (the
// residual block is train/residual_layer.hpp). Shapes are per sample and checked when
// the layer is built; a mismatch is reported, never computed on.
#pragma once

#include <memory>

#include "base/expected.hpp"
#include "tensor/conv.hpp"
#include "tensor/pool.hpp"
#include "train/layer.hpp"

namespace troupe {

// y = x W^T + b, W (out, in), b (out). Input is (in) per sample, or a sequence (T, in)
// mapped position by position to (T, out).
expected<std::shared_ptr<const layer>> make_linear(const shape& in, std::int64_t out_features, init_kind init);
// NCHW convolution, per-sample input (C, H, W).
expected<std::shared_ptr<const layer>> make_conv2d(const shape& in, std::int64_t out_channels, std::int64_t kernel,
                                                   std::int64_t stride, std::int64_t pad, init_kind init);
expected<std::shared_ptr<const layer>> make_maxpool2d(const shape& in, std::int64_t kernel, std::int64_t stride);
std::shared_ptr<const layer> make_relu(const shape& in);
std::shared_ptr<const layer> make_flatten(const shape& in);
// GELU, the exact form (tensor/elementwise.hpp), any input shape.
std::shared_ptr<const layer> make_gelu(const shape& in);
// Layer normalisation over the input's last dimension (tensor/layer_norm.hpp), with a
// weight (initialised to 1) and a bias (0) of that length.
std::shared_ptr<const layer> make_layer_norm(const shape& in);
// Batch normalisation over the channels of a (C, H, W) input (BatchNorm2d) or over flat
// features (BatchNorm1d), with a weight (1) and a bias (0) per channel; batch statistics
// in training, the population's in an evaluation that has them (Note [Population
// statistics] in train/layer.hpp).
expected<std::shared_ptr<const layer>> make_batch_norm(const shape& in);
// Inverted dropout at rate p (0 < p < 1) in a training pass, the identity in an
// evaluation (Note [Dropout seeds] in train/layer.hpp); any input shape.
expected<std::shared_ptr<const layer>> make_dropout(const shape& in, float p);
// A rate as layer lists write it ("0.1"): the shortest text that reads back as p.
std::string format_rate(float p);

}  // namespace troupe
