// A residual block: y = x + f(x), f a short sequence of layers that ends in x's shape
// (He et al. 2016; the pre-norm transformer block's MLP half is
// residual(layernorm, linear, gelu, linear)). One layer to the model, so a pipeline cuts
// around it, never inside.
#pragma once

#include <memory>
#include <vector>

#include "base/expected.hpp"
#include "train/layer.hpp"

namespace troupe {

// Note [Residual blocks]
// The block keeps f's layers' outputs, and what each of them keeps, in its own `kept`
// buffer of the microbatch, so its backward runs f's backward on them and adds the two
// gradient paths: dL/dx = dy + df^T dy. Its
// parameters are its layers' in order, named "<i>.<name>" (the model prefixes "res<k>.").
// Refused: no layers, a layer that saves state for backward (max pooling), more than
// max_layer_params parameter tensors, an output shape other than the input's.
expected<std::shared_ptr<const layer>> make_residual(const shape& in, std::vector<std::shared_ptr<const layer>> inner);

}  // namespace troupe
