// Evaluation of a model's parameters on a dataset: accuracy and mean loss, in batches, and
// whether a model's outputs fit a dataset's labels at all.
#pragma once

#include <cstdint>
#include <optional>

#include "train/dataset.hpp"
#include "train/model.hpp"

namespace troupe {

struct eval_result {
  double accuracy = 0.0;  // fraction in [0, 1], of samples or, for a sequence model, of positions
  double loss = 0.0;      // mean softmax cross-entropy (nats), over the same
  std::int64_t samples = 0;
};

// Why m's outputs cannot be scored against d's labels, which needs one row of class
// scores for each label (one a sample, or one a position of a text's window), or nothing.
std::optional<failure> labels_mismatch(const model& m, const dataset& d);

// Note [Population statistics] (train/layer.hpp): the model's statistics (in `c`'s
// memory), estimated by a calibration pass over `batches` batches of `batch_size` rows of
// `train`, the first of one fixed permutation (the same rows for every call); params is
// in `c`'s memory. Fewer rows when the set is smaller.
inline constexpr std::int64_t calibration_batches = 20, calibration_batch_size = 200;
tensor estimate_statistics(const model& m, const_tensor_view params, const dataset& train, const compute& c,
                           std::int64_t batches = calibration_batches,
                           std::int64_t batch_size = calibration_batch_size);

// Runs the whole dataset through the model in batches of batch_size (of at most 8192
// positions for a sequence model), without shuffling, on compute `c`. params is host
// memory. A model with statistics (BatchNorm) is first calibrated on `calibrate_on`, the
// training set; without one each batch is normalised with its own statistics.
eval_result evaluate(const model& m, const_tensor_view params, const dataset& d, std::int64_t batch_size = 1000,
                     const compute& c = host_compute(), const dataset* calibrate_on = nullptr);

}  // namespace troupe
