// Token and position embeddings on host f32 tensors (GPT-2's input layer): each position
// of a sequence of token ids becomes the row of its token in a table plus the row of its
// position. Token ids arrive as f32 (the dataset's input tensor), each a whole number in
// [0, vocab).
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace troupe {

// out (B, T, C) = table[ids[b, t]] (V, C) + positions[t] (T, C). Throws, naming the
// position, on an id that is not a whole number in [0, V).
void embedding_forward(tensor_view out, const_tensor_view ids, const_tensor_view table, const_tensor_view positions);

// grad_table (V, C) += sum of grad_out rows by token id, in position order; grad_positions
// (T, C) += sum over the batch of grad_out. Ids are those forward accepted.
void embedding_backward(tensor_view grad_table, tensor_view grad_positions, const_tensor_view grad_out,
                        const_tensor_view ids);

}  // namespace troupe
