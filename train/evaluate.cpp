// evaluate: batched forward passes and accuracy counting, after estimating the population
// statistics of a model that normalises batches.
#include "train/evaluate.hpp"

#include <algorithm>

#include "train/sampler.hpp"

namespace troupe {

namespace {

// Which training rows calibrate the statistics: the same for every evaluation of a job.
constexpr std::uint64_t calibration_seed = 0xca11b4a7e5ULL;

}  // namespace

std::optional<failure> labels_mismatch(const model& m, const dataset& d) {
  if (m.positions() == d.labels_per_sample()) return std::nullopt;
  return failure{"model " + m.name() + " gives " + std::to_string(m.positions()) + " row(s) of class scores a sample, " +
                 "but " + d.name + " has " + std::to_string(d.labels_per_sample()) + " label(s) a sample: " +
                 (d.labels_per_sample() > 1 ? "a text needs a model that scores every position (end it in linear "
                                              "classes, without flatten)"
                                            : "a classifier's model ends in one row of class scores (flatten first)")};
}

tensor estimate_statistics(const model& m, const_tensor_view params, const dataset& train, const compute& c,
                           std::int64_t batches, std::int64_t batch_size) {
  tensor stats = c.make({std::max<std::int64_t>(1, m.stats_floats())});
  const std::int64_t n = train.size();
  if (m.stats_floats() == 0 || n == 0) return stats;
  batch_size = std::min(batch_size, n);
  batches = std::min(batches, n / batch_size);
  const auto order = epoch_indices(n, calibration_seed, 0, 0, 1);
  auto acts = m.make_activations(batch_size, c);
  auto scratch = m.make_scratch(batch_size, c);
  tensor xb(train.sample_shape().prepend(batch_size)), yb(train.labels.sizes().drop_front().prepend(batch_size), dtype::i32);
  tensor staged = c.host_memory() ? tensor() : c.make(xb.sizes());
  for (std::int64_t k = 0; k < batches; ++k) {
    gather_batch(xb, yb, train, std::span<const std::int64_t>(order).subspan(static_cast<std::size_t>(k * batch_size),
                                                                            static_cast<std::size_t>(batch_size)));
    const_tensor_view x = xb;
    if (!staged.empty()) {
      c.upload(staged, xb);
      x = staged;
    }
    forward_pass calibration;
    calibration.stats = stats.view().flat(0, m.stats_floats());
    calibration.calibrating = k;
    m.forward(acts, scratch, x, params, c, calibration);
  }
  return stats;
}

eval_result evaluate(const model& m, const_tensor_view params, const dataset& d, std::int64_t batch_size,
                     const compute& c, const dataset* calibrate_on) {
  eval_result r;
  const std::int64_t n = d.size();
  if (n == 0) return r;
  // A sequence model's activations grow with its positions (and attention's with their
  // square): batches of at most 8192 positions keep evaluation's memory near training's.
  batch_size = std::min({batch_size, n, std::max<std::int64_t>(1, 8192 / m.positions())});
  auto acts = m.make_activations(batch_size, c);
  auto scratch = m.make_scratch(batch_size, c);
  tensor probs = c.make(m.output_shape().prepend(batch_size));
  // Off the host, parameters and each batch are copied into the compute's memory first.
  const bool staged = !c.host_memory();
  tensor staged_params, xb, yb;
  if (staged) {
    staged_params = c.make(params.sizes());
    c.upload(staged_params, params);
    params = staged_params;
    xb = c.make(d.images.sizes().drop_front().prepend(batch_size));
    yb = c.make(d.labels.sizes().drop_front().prepend(batch_size), dtype::i32);
  }
  forward_pass pass;  // an evaluation
  tensor stats;
  if (m.stats_floats() > 0 && calibrate_on && calibrate_on->size() > 0) {
    stats = estimate_statistics(m, params, *calibrate_on, c);
    pass.stats = stats.view().flat(0, m.stats_floats());
  }
  std::int64_t correct = 0;
  double loss_sum = 0.0;
  for (std::int64_t start = 0; start < n; start += batch_size) {
    const std::int64_t b = std::min(batch_size, n - start);
    const_tensor_view x = d.images.view().slice(start, start + b);
    const_tensor_view y = d.labels.view().slice(start, start + b);
    if (staged) {
      c.upload(xb.view().slice(0, b), x);
      c.upload(yb.view().slice(0, b), y);
      x = xb.view().slice(0, b);
      y = yb.view().slice(0, b);
    }
    // One row of class scores a sample, or a position of a sequence, each with its label.
    const std::int64_t rows = b * m.positions();
    const_tensor_view logits = m.forward(acts, scratch, x, params, c, pass).reshape({rows, m.classes()});
    y = y.reshape({rows});
    loss_sum += c.softmax_xent_forward(probs.view().slice(0, b).reshape({rows, m.classes()}), logits, y) * rows;
    correct += c.count_correct(logits, y);
  }
  const double rows = static_cast<double>(n * m.positions());
  r.samples = n;
  r.accuracy = static_cast<double>(correct) / rows;
  r.loss = loss_sum / rows;
  return r;
}

}  // namespace troupe
