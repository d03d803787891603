// The host loops of the optimizer updates: SGD with momentum and Adam, one element at a
// time through the shared functors of tensor/elementwise.hpp (the CUDA kernels apply the
// same functors). compute and the CPU backend call these; optimizer_state (optimizer.hpp)
// sits above compute and reaches them through it.
#pragma once

#include "tensor/elementwise.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

// param -= SGD-with-momentum update; velocity is the momentum buffer (zero at start).
// All views contiguous f32 host, same numel.
void sgd_step(tensor_view param, const_tensor_view grad, tensor_view velocity, const fn::sgd_momentum& f);
// param -= one member's SGD update with its own velocity (fn::sgd_member_momentum). All
// views contiguous f32 host, same numel.
void sgd_member_step(tensor_view param, const_tensor_view grad, tensor_view velocity,
                     const fn::sgd_member_momentum& f);
// Adam update with moment buffers m and v (zero at start); f carries the step's bias corrections.
void adam_step(tensor_view param, const_tensor_view grad, tensor_view m, tensor_view v, const fn::adam& f);

}  // namespace troupe
