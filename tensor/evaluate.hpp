// Evaluation of a model's parameters on a dataset: accuracy and mean loss, in batches, and
// whether a model's outputs fit a dataset's labels at all.
#pragma once

#include <cstdint>
#include <optional>

#include "tensor/dataset.hpp"
#include "tensor/model.hpp"

namespace troupe {

struct eval_result {
  double accuracy = 0.0;  // fraction in [0, 1], of samples or, for a sequence model, of positions
  double loss = 0.0;      // mean softmax cross-entropy (nats), over the same
  std::int64_t samples = 0;
};

// Why m's outputs cannot be scored against d's labels, which needs one row of class
// scores for each label (one a sample, or one a position of a text's window), or nothing.
std::optional<failure> labels_mismatch(const model& m, const dataset& d);

// Runs the whole dataset through the model in batches of batch_size (of at most 8192
// positions for a sequence model), without shuffling, on compute `c`. params is host memory.
eval_result evaluate(const model& m, const_tensor_view params, const dataset& d, std::int64_t batch_size = 1000,
                     const compute& c = host_compute());

}  // namespace troupe
