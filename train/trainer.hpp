// The local trainer: one process, no actors, the reference every distributed mode is
// compared with. It shuffles deterministically from the seed, runs forward, loss,
// backward and the optimizer per batch, evaluates on the test set after each epoch, and
// reports progress through callbacks (the CLI decides how to show it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/expected.hpp"
#include "tensor/optimizer.hpp"
#include "train/dataset.hpp"
#include "train/model.hpp"
#include "train/stage_replica.hpp"

namespace troupe {

// The defaults are the command's defaults, chosen on Fashion-MNIST (README, benchmarks):
// SGD with Nesterov momentum 0.9 and weight decay 5e-4, lr 0.05 warmed up over half an
// epoch and then cosine-decayed to zero. They train both the MLP and the CNN.
// One worker's batch, the one the default lr is tuned for; a job of several workers splits
// its batch over them (Note [The job's batch] in core/job.hpp).
inline constexpr std::int64_t reference_batch = 128;

struct local_train_config {
  std::string model = "mlp";
  int epochs = 5;
  std::int64_t batch_size = reference_batch;
  float lr = 0.05f;
  optimizer_config optimizer{optimizer_kind::sgd, 0.9f, true, 5e-4f};
  lr_schedule_kind schedule = lr_schedule_kind::cosine;
  float warmup_epochs = 0.5f;
  std::uint64_t seed = 1;
  std::string augment = "none";  // of the training images (train/augment.hpp), as name_of writes it
  init_scheme init = init_scheme::he;  // of the parameters drawn from the seed (Note [Initialisation schemes])
  tensor initial_params;  // host f32 in the model's layout (train-local --init-from); empty: from the seed
};

struct step_progress {
  int epoch = 0;                       // 0-based
  std::int64_t step_in_epoch = 0, steps_per_epoch = 0;
  std::int64_t samples_done = 0;       // since the start of training
  double seconds = 0.0;                // training time so far (evaluation excluded)
  double loss = 0.0;                   // of the last batch
};

struct epoch_report {
  int epoch = 0;                       // 0-based
  double train_loss = 0.0;             // mean over the epoch's batches
  double samples_per_second = 0.0;     // this epoch
  double epoch_seconds = 0.0;
  double test_accuracy = 0.0, test_loss = 0.0;
  float lr = 0.f;                      // at the end of the epoch
};

struct train_result {
  std::string model;
  int epochs = 0;
  double test_accuracy = 0.0;
  double test_loss = 0.0;              // mean cross-entropy (nats) of the last evaluation
  double train_seconds = 0.0;          // evaluation excluded
  double samples_per_second = 0.0;
  double final_train_loss = 0.0;
  tensor params;
};

struct train_callbacks {
  std::function<void(const step_progress&)> on_step;   // after every batch; keep it cheap
  std::function<void(const epoch_report&)> on_epoch;
};

// One model replica: parameters, gradients and the buffers a training step needs, for
// batches of up to max_batch samples: the one-stage, one-microbatch stage_replica.
// local_stepper adds an optimizer. Holds no data.
class replica {
 public:
  replica(model m, std::int64_t max_batch, const compute& c = host_compute());
  // Forward (a training pass named by `seed`, Note [Dropout seeds] in train/layer.hpp),
  // loss and backward on (x (B, ...), y (B) i32), B <= max_batch: grads() then holds the
  // gradient of the batch's mean loss. Returns that loss (not finite if the parameters
  // have diverged).
  double compute_gradients(const_tensor_view x, const_tensor_view y, std::uint64_t seed = 0);
  const model& net() const { return stage_.net(); }
  // Host-visible parameters and gradients (stage_replica's mirrors on a device: write
  // params() then commit_params(); grads() downloads them).
  tensor& params() { return stage_.params(); }
  void commit_params() { stage_.commit_params(); }
  const tensor& grads() { return stage_.fetch_grads(); }
  // The same in compute memory, for an optimizer that runs there.
  tensor& compute_params() { return stage_.compute_params(); }
  const tensor& compute_grads() const { return stage_.compute_grads(); }
  const tensor& fetch_params() { return stage_.fetch_params(); }
  const compute& exec() const { return stage_.exec(); }
  // Wall time of the last compute_gradients, split at the loss.
  double last_forward_seconds() const { return forward_s_; }
  double last_backward_seconds() const { return backward_s_; }

 private:
  stage_replica stage_;
  double forward_s_ = 0.0, backward_s_ = 0.0;
};

// A replica plus optimizer state: the training step of train_local, also used by benchmarks.
class local_stepper {
 public:
  // The parameters start from seed by `init`; the optimizer runs where the model does (its
  // state in that memory).
  local_stepper(model m, const optimizer_config& opt, std::int64_t max_batch, std::uint64_t seed,
                const compute& c = host_compute(), init_scheme init = init_scheme::he);
  // compute_gradients, then one optimizer update with learning rate lr. Returns the loss.
  double step(const_tensor_view x, const_tensor_view y, float lr, std::uint64_t seed = 0);
  // Replaces the parameters with `host` (num_params f32 in host memory).
  void load_params(const_tensor_view host);
  const model& net() const { return replica_.net(); }
  // The current parameters in host memory (downloaded first when they live on a device).
  const tensor& params() { return replica_.fetch_params(); }
  const compute& exec() const { return replica_.exec(); }
  // The parameters as a host tensor that owns its memory.
  tensor take_params() { return exec().on_backend() ? tensor(replica_.fetch_params()) : std::move(replica_.params()); }

 private:
  replica replica_;
  optimizer_state opt_;
};

// The schedule a config implies for a dataset of n training samples.
lr_schedule make_schedule(const local_train_config& cfg, std::int64_t n);

// Trains from scratch. Fails (with a message that says what to change) if the model does
// not fit the data or the loss stops being finite.
// The math runs on `c` (the host unless a backend is given); results are the same to
// within the backend's stated tolerances.
expected<train_result> train_local(const local_train_config& cfg, const dataset_split& data,
                                   const train_callbacks& cb = {}, const compute& c = host_compute());

}  // namespace troupe
