// tensor_fusion: which tensors travel together in one collective (Note [Tensor fusion]),
// and packing them into and out of the fusion buffer. The Python module's
// allreduce_gradients groups a model's gradients with plan_fusion (client/python).
//
// Note [Tensor fusion]
// Every collective pays a latency per hop of the ring, so many small gradients reduced
// one by one cost far more than their bytes. As Horovod does, consecutive tensors are
// packed into one buffer of at most the fusion threshold and reduced together; a tensor
// larger than the threshold travels alone (the ring cuts it into pieces anyway). The
// groups follow the order given, which every rank gives alike, so every rank packs the
// same buffers. A threshold of 0 fuses nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/tensor.hpp"

namespace troupe {

struct fusion_group {
  std::size_t first = 0, last = 0;  // tensors [first, last)
  std::int64_t numel = 0;           // floats they hold together
};

// The groups of f32 tensors of these element counts, in order, under threshold_bytes.
std::vector<fusion_group> plan_fusion(const std::vector<std::int64_t>& numels, std::int64_t threshold_bytes);

// Copies the group's tensors, one after another, into `buffer` (g.numel floats) and back.
void pack_fusion(tensor_view buffer, const std::vector<const_tensor_view>& tensors, const fusion_group& g);
void unpack_fusion(const_tensor_view buffer, const std::vector<tensor_view>& tensors, const fusion_group& g);

}  // namespace troupe
