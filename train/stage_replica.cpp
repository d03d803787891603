// stage_replica: slots, forward, loss and backward of one stage.
#include "train/stage_replica.hpp"

#include <utility>

namespace troupe {

stage_replica::stage_replica(model stage, bool first, bool last, std::int64_t max_rows, int slots,
                             const compute& c)
    : c_(&c),
      model_(std::move(stage)),
      first_(first),
      last_(last),
      max_rows_(max_rows),
      params_(c.make({model_.num_params()})),
      grads_(c.make({model_.num_params()})),
      scratch_(model_.make_scratch(max_rows, c)) {
  TROUPE_CHECK(max_rows >= 1 && slots >= 1, "stage_replica needs at least one row and one slot");
  slots_.resize(static_cast<std::size_t>(slots));
  for (auto& s : slots_) {
    s.input = c.make(model_.input_shape().prepend(max_rows));
    s.acts = model_.make_activations(max_rows, c);
    if (last_) s.dlogits = c.make(model_.output_shape().prepend(max_rows));
  }
  if (last_) probs_ = c.make(model_.output_shape().prepend(max_rows));
  if (!first_) grad_input_ = c.make(model_.input_shape().prepend(max_rows));
  if (mirrored()) {  // staging for what arrives from the host
    if (last_) labels_ = c.make({max_rows * model_.positions()}, dtype::i32);
    else grad_output_ = c.make(model_.output_shape().prepend(max_rows));
    host_params_ = tensor({model_.num_params()});
    host_grads_ = tensor({model_.num_params()});
    if (!first_) host_grad_input_ = tensor(model_.input_shape().prepend(max_rows));
  }
}

void stage_replica::zero_grads() { c_->fill_zero(grads_); }

void stage_replica::commit_params() {
  if (mirrored()) c_->upload(params_, host_params_);
}

const tensor& stage_replica::fetch_params() {
  if (mirrored()) c_->download(host_params_, params_);
  return params();
}

const tensor& stage_replica::fetch_grads() {
  if (mirrored()) c_->download(host_grads_, grads_);
  return grads();
}

void stage_replica::commit_params(std::int64_t offset, std::int64_t numel) {
  if (mirrored()) c_->upload(params_.view().flat(offset, numel), host_params_.view().flat(offset, numel));
}

const tensor& stage_replica::fetch_grads(std::int64_t offset, std::int64_t numel) {
  if (mirrored()) c_->download(host_grads_.view().flat(offset, numel), grads_.view().flat(offset, numel));
  return grads();
}

void stage_replica::all_reduce_grads(group_comm& g) { g.all_reduce_sum({grads_.view()}); }

void stage_replica::share_params(group_comm& g, bool leader) {
  if (!leader) c_->fill_zero(params_);
  g.all_reduce_sum({params_.view()});
  if (mirrored()) c_->download(host_params_, params_);
}

void stage_replica::share_grads(group_comm& g, bool leader) {
  if (!leader) c_->fill_zero(grads_);
  else if (mirrored()) c_->upload(grads_, host_grads_);
  g.all_reduce_sum({grads_.view()});
  if (mirrored()) c_->download(host_grads_, grads_);
}

tensor stage_replica::output_on_host(int id) const {
  const_tensor_view out = output(id);
  tensor host = tensor::uninitialized(out.sizes());
  c_->download(host, out);
  return host;
}

int stage_replica::forward(const_tensor_view input, std::uint64_t seed) {
  const int id = begin_forward(input, seed);
  end_forward();
  return id;
}

int stage_replica::begin_forward(const_tensor_view input, std::uint64_t seed) {
  TROUPE_CHECK(pending_fwd_.slot < 0, "stage_replica::begin_forward: another forward is in progress");
  const std::int64_t rows = input.size(0);
  TROUPE_CHECK(rows >= 1 && rows <= max_rows_, "stage_replica::forward: " + std::to_string(rows) +
                                                   " rows for buffers of " + std::to_string(max_rows_));
  int id = -1;
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i].busy) {
      id = static_cast<int>(i);
      break;
    }
  TROUPE_CHECK(id >= 0, "stage_replica::forward: all " + std::to_string(slots_.size()) + " slots are in use");
  slot& s = slots_[id];
  tensor_view in = s.input.view().slice(0, rows);
  c_->upload(in, input.reshape(in.sizes()));
  s.busy = true;
  s.rows = rows;
  peak_ = std::max(peak_, ++stored_);
  pending_fwd_ = {id, 0, seed};
  return id;
}

void stage_replica::forward_up_to(int layer) {
  TROUPE_CHECK(pending_fwd_.slot >= 0, "stage_replica::forward_up_to: no forward in progress");
  if (layer <= pending_fwd_.layer) return;
  slot& s = slots_[static_cast<std::size_t>(pending_fwd_.slot)];
  forward_pass pass;
  pass.training = true;
  pass.seed = pending_fwd_.seed;
  model_.forward_layers(s.acts, scratch_, s.input.view().slice(0, s.rows), params_, pending_fwd_.layer, layer, *c_,
                        pass);
  pending_fwd_.layer = layer;
}

void stage_replica::end_forward() {
  forward_up_to(model_.num_layers());
  pending_fwd_.slot = -1;
}

const_tensor_view stage_replica::output(int id) const {
  const slot& s = slots_.at(static_cast<std::size_t>(id));
  TROUPE_CHECK(s.busy, "stage_replica::output: slot not in use");
  return s.acts.outs.back().view().slice(0, s.rows);
}

double stage_replica::loss(int id, const_tensor_view labels, float grad_scale) {
  TROUPE_CHECK(last_, "stage_replica::loss: only the last stage computes the loss");
  slot& s = slots_.at(static_cast<std::size_t>(id));
  // One label a row of class scores: a sample's, or each position's of a sequence.
  const std::int64_t b = s.rows, classes = model_.classes(), positions = model_.positions(), rows = b * positions;
  TROUPE_CHECK(s.busy && labels.numel() == rows, "stage_replica::loss: labels do not match the slot");
  tensor_view p = probs_.view().slice(0, b).reshape({rows, classes});
  const_tensor_view y = labels.reshape({rows});
  if (!c_->host_memory()) {
    tensor_view staged = labels_.view().flat(0, rows);
    c_->upload(staged, y);
    y = staged;
  }
  const double l = c_->softmax_xent_forward(p, output(id).reshape({rows, classes}), y);
  c_->softmax_xent_backward(s.dlogits.view().slice(0, b).reshape({rows, classes}), p, y,
                            grad_scale / static_cast<float>(positions));
  return l;
}

const_tensor_view stage_replica::backward(int id, const_tensor_view grad_output) {
  begin_backward(id, grad_output);
  return end_backward();
}

void stage_replica::begin_backward(int id, const_tensor_view grad_output) {
  TROUPE_CHECK(pending_bwd_.slot < 0, "stage_replica::begin_backward: another backward is in progress");
  slot& s = slots_.at(static_cast<std::size_t>(id));
  TROUPE_CHECK(s.busy, "stage_replica::backward: slot not in use");
  const std::int64_t b = s.rows;
  if (!last_)
    TROUPE_CHECK(grad_output.numel() == b * model_.output_shape().numel(),
                 "stage_replica::backward: gradient of shape " + grad_output.sizes().str() + " for " +
                     std::to_string(b) + " rows of " + model_.output_shape().str());
  const_tensor_view dy;
  if (last_) {
    dy = s.dlogits.view().slice(0, b);
  } else if (c_->host_memory()) {
    dy = grad_output;
  } else {
    tensor_view staged = grad_output_.view().slice(0, b);
    c_->upload(staged, grad_output.reshape(staged.sizes()));
    dy = staged;
  }
  pending_bwd_ = {id, model_.num_layers(), dy.reshape(model_.output_shape().prepend(b))};
}

void stage_replica::backward_down_to(int layer) {
  TROUPE_CHECK(pending_bwd_.slot >= 0, "stage_replica::backward_down_to: no backward in progress");
  if (layer >= pending_bwd_.layer) return;
  const slot& s = slots_[static_cast<std::size_t>(pending_bwd_.slot)];
  const std::int64_t b = s.rows;
  tensor_view gin = first_ ? tensor_view() : grad_input_.view().slice(0, b);
  pending_bwd_.dy = model_.backward_layers(s.acts, scratch_, s.input.view().slice(0, b), pending_bwd_.dy, params_,
                                           grads_, gin, pending_bwd_.layer, layer, *c_);
  pending_bwd_.layer = layer;
}

const_tensor_view stage_replica::end_backward() {
  backward_down_to(0);
  slot& s = slots_[static_cast<std::size_t>(std::exchange(pending_bwd_.slot, -1))];
  const std::int64_t b = s.rows;
  s.busy = false;
  --stored_;
  if (first_) return const_tensor_view();
  tensor_view gin = grad_input_.view().slice(0, b);
  if (!mirrored()) return gin;
  tensor_view host = host_grad_input_.view().slice(0, b);
  c_->download(host, gin);
  return host;
}

}  // namespace troupe
