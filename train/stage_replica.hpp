// stage_replica: one pipeline stage of a model (or the whole model: a one-stage pipeline)
// with its parameters, gradients and the buffers of up to `slots` microbatches in flight.
// A microbatch takes a slot at its forward and gives it back at its backward; the slot
// keeps the stage's input and every layer's activations in between. Parameter gradients
// accumulate over the microbatches of a minibatch until zero_grads().
//
// The math does not depend on how forwards and backwards interleave: each microbatch's
// forward reads only its own slot and the parameters, and gradients accumulate in the
// order backwards run (microbatch order under both schedules). With one microbatch the
// result is bitwise the unsplit model's.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/group_comm.hpp"
#include "train/model.hpp"

namespace troupe {

class stage_replica {
 public:
  // stage: the stage's model (model::stage or a whole model). first: its input is data
  // (nothing upstream wants dL/d(input)); last: it ends in the loss. Microbatches have at
  // most max_rows rows; at most `slots` are between forward and backward at once.
  // `c` (and the backend behind it) must outlive the replica.
  stage_replica(model stage, bool first, bool last, std::int64_t max_rows, int slots,
                const compute& c = host_compute());

  const model& net() const { return model_; }
  bool first() const { return first_; }
  bool last() const { return last_; }
  std::int64_t max_rows() const { return max_rows_; }
  const compute& exec() const { return *c_; }
  // Host-visible parameters; after writing them, commit_params() (a no-op on the host).
  tensor& params() { return mirrored() ? host_params_ : params_; }
  const tensor& params() const { return mirrored() ? host_params_ : params_; }
  void commit_params();
  // The same for elements [offset, offset + numel) only.
  void commit_params(std::int64_t offset, std::int64_t numel);
  // Host-visible gradients, current after fetch_grads() (a no-op on the host).
  const tensor& grads() const { return mirrored() ? host_grads_ : grads_; }
  // The same, to change there (a ring all-reduce sums into them); the optimizer on the
  // host reads them as they are.
  tensor& grads() { return mirrored() ? host_grads_ : grads_; }
  const tensor& fetch_grads();
  // The same for elements [offset, offset + numel) only (the others as they were).
  const tensor& fetch_grads(std::int64_t offset, std::int64_t numel);
  // The parameters and gradients in compute memory (for an optimizer that runs there);
  // after updating them there, fetch_params() brings params() up to date.
  tensor& compute_params() { return params_; }
  const tensor& compute_grads() const { return grads_; }
  const tensor& fetch_params();
  void zero_grads();
  // Local groups: sums the gradients across the group, in place; gives every member the
  // leader's committed parameters, or the leader's host gradients (grads(), which the
  // others' become; the others contribute zeros). Throw backend_error.
  void all_reduce_grads(group_comm& g);
  void share_params(group_comm& g, bool leader);
  void share_grads(group_comm& g, bool leader);

  // Microbatches between forward and backward now, and the most there ever were.
  int stored() const { return stored_; }
  int peak_stored() const { return peak_; }

  // Copies input (rows, input_shape...) into a free slot and runs the stage forward, a
  // training pass named by `seed` (Note [Dropout seeds] in train/layer.hpp). Returns the
  // slot. Fails (TROUPE_CHECK) when every slot is taken or rows > max_rows.
  int forward(const_tensor_view input, std::uint64_t seed = 0);
  // The same in parts, for layer-by-layer pulls: begin_forward takes forward()'s input
  // and returns the slot; forward_up_to(l) runs the layers below l that have not run
  // (each reads only its own parameters); end_forward runs the rest. One microbatch at a
  // time, and the result is forward()'s.
  int begin_forward(const_tensor_view input, std::uint64_t seed = 0);
  void forward_up_to(int layer);
  void end_forward();
  // The stage's output for the slot's microbatch: (rows, output_shape...), in compute memory.
  const_tensor_view output(int slot) const;
  // The same, copied into a new host tensor (for the next stage).
  tensor output_on_host(int slot) const;
  // Last stage only: softmax cross-entropy of the slot's output against labels (rows) i32,
  // or (rows, positions) for a sequence model; keeps dL/dlogits for the backward, scaled by
  // grad_scale for the samples and 1/positions for the positions (the loss is the mean over
  // every position). Returns the mean loss over the slot's rows and positions.
  double loss(int slot, const_tensor_view labels, float grad_scale);
  // Backpropagates the slot's microbatch, accumulating into grads(), and frees the slot.
  // grad_output: dL/d(output) (rows, output_shape...); ignored on the last stage, which
  // uses its loss's. Returns dL/d(input) (empty on the first stage) as a host view, valid
  // until the next backward.
  const_tensor_view backward(int slot, const_tensor_view grad_output);
  // The same in parts, for gradient buckets: begin_backward takes backward()'s arguments
  // (grad_output must stay valid until end_backward); backward_down_to(l) runs the layers
  // above l that have not run, after which the gradients of layers >= l hold this
  // microbatch's contribution; end_backward runs the rest and returns what backward()
  // returns. One microbatch at a time.
  void begin_backward(int slot, const_tensor_view grad_output);
  void backward_down_to(int layer);
  const_tensor_view end_backward();

 private:
  struct slot {
    bool busy = false;
    std::int64_t rows = 0;
    tensor input;               // (max_rows, input_shape...)
    model_activations acts;
    tensor dlogits;             // last stage: (max_rows, classes)
  };
  bool mirrored() const { return !c_->host_memory(); }

  const compute* c_;
  model model_;
  bool first_, last_;
  std::int64_t max_rows_;
  tensor params_, grads_;            // in compute memory
  tensor host_params_, host_grads_;  // mirrors, when that memory is not the host's
  tensor labels_;                    // mirrored, last stage: (max_rows * positions) i32, in compute memory
  tensor grad_output_;               // mirrored, not last: (max_rows, output_shape...), in compute memory
  tensor host_grad_input_;           // mirror of grad_input_, when mirrored
  std::vector<slot> slots_;
  model_scratch scratch_;
  tensor probs_;                // last stage: (max_rows, classes)
  tensor grad_input_;           // not first: (max_rows, input_shape...)
  int stored_ = 0, peak_ = 0;
  // The backward in progress (begin_backward): its slot (-1: none), the layers still to
  // run [0, layer), and dL/d(output of layer - 1).
  struct pending_backward {
    int slot = -1;
    int layer = 0;
    const_tensor_view dy;
  } pending_bwd_;
  // The forward in progress (begin_forward): its slot (-1: none), the layers run [0, layer).
  struct pending_forward {
    int slot = -1;
    int layer = 0;
    std::uint64_t seed = 0;
  } pending_fwd_;
};

}  // namespace troupe
