// evaluate: batched forward passes and accuracy counting.
#include "tensor/evaluate.hpp"

#include <algorithm>

namespace troupe {

eval_result evaluate(const model& m, const_tensor_view params, const dataset& d, std::int64_t batch_size,
                     const compute& c) {
  eval_result r;
  const std::int64_t n = d.size();
  if (n == 0) return r;
  batch_size = std::min(batch_size, n);
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
    yb = c.make({batch_size}, dtype::i32);
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
    const_tensor_view logits = m.forward(acts, scratch, x, params, c);
    const_tensor_view logits2d = logits.reshape({b, m.output_shape().numel()});
    loss_sum += c.softmax_xent_forward(probs.view().slice(0, b).reshape({b, m.output_shape().numel()}), logits2d, y) * b;
    correct += c.count_correct(logits2d, y);
  }
  r.samples = n;
  r.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  r.loss = loss_sum / static_cast<double>(n);
  return r;
}

}  // namespace troupe
