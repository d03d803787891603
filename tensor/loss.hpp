// Softmax cross-entropy (numerically stable, mean over the batch) and argmax accuracy.
// Labels are i32 class indices in [0, C); the dataset readers guarantee that range.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace troupe {

// probs (B, C) <- softmax(logits (B, C)); returns mean over rows of -log probs[label].
double softmax_xent_forward(tensor_view probs, const_tensor_view logits, const_tensor_view labels);

// grad_logits (B, C) <- scale * (probs - onehot(labels)). scale is 1/B for the mean loss of
// this batch, or 1/B_total when the batch is one microbatch of a larger minibatch.
void softmax_xent_backward(tensor_view grad_logits, const_tensor_view probs, const_tensor_view labels,
                           float scale);

// Rows whose largest logit (the first one on ties) is at the label.
std::int64_t count_correct(const_tensor_view logits, const_tensor_view labels);

}  // namespace troupe
