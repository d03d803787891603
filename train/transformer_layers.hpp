// The layers a decoder-only transformer adds to train/layers.hpp: token and position
// embeddings, and causal multi-head self-attention with its input and output projections.
// Both read a per-sample sequence: the embedding (T) token ids, the attention (T, C).
#pragma once

#include <memory>

#include "base/expected.hpp"
#include "train/layer.hpp"

namespace troupe {

// (T) token ids -> (T, dim): a (vocab, dim) token table plus a (T, dim) position table,
// both N(0, 0.02) at initialisation (GPT-2's).
expected<std::shared_ptr<const layer>> make_embedding(const shape& in, std::int64_t vocab, std::int64_t dim);

// (T, C) -> (T, C): x W_qkv^T + b_qkv split into queries, keys and values of `heads` heads
// of C / heads columns, causal attention (tensor/attention.hpp), then y W_o^T + b_o.
// Forward keeps the projections and the attention weights (T x T a head) in the
// microbatch's `kept` buffer for backward, whose gradients go in the layer's scratch.
expected<std::shared_ptr<const layer>> make_attention(const shape& in, std::int64_t heads);

}  // namespace troupe
