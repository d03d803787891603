// train_local: the single-process training loop.
#include "train/trainer.hpp"

#include <chrono>
#include <cmath>

#include "tensor/loss.hpp"
#include "tensor/random.hpp"
#include "train/augment.hpp"
#include "train/evaluate.hpp"
#include "train/sampler.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

}  // namespace

replica::replica(model m, std::int64_t max_batch, const compute& c)
    : stage_(std::move(m), true, true, max_batch, 1, c) {}

double replica::compute_gradients(const_tensor_view x, const_tensor_view y, std::uint64_t seed) {
  const auto t0 = clock_type::now();
  const int slot = stage_.forward(x, seed);
  const double loss = stage_.loss(slot, y, 1.0f / static_cast<float>(x.size(0)));
  const auto t1 = clock_type::now();
  stage_.zero_grads();
  stage_.backward(slot, const_tensor_view());
  forward_s_ = std::chrono::duration<double>(t1 - t0).count();
  backward_s_ = seconds_since(t1);
  return loss;
}

local_stepper::local_stepper(model m, const optimizer_config& opt, std::int64_t max_batch, std::uint64_t seed,
                             const compute& c, init_scheme init)
    : replica_(std::move(m), max_batch, c), opt_(opt, replica_.net().num_params(), c) {
  replica_.net().init_params(replica_.params(), seed, init);
  replica_.commit_params();
}

void local_stepper::load_params(const_tensor_view host) {
  copy(replica_.params(), host);
  replica_.commit_params();
}

double local_stepper::step(const_tensor_view x, const_tensor_view y, float lr, std::uint64_t seed) {
  const double loss = replica_.compute_gradients(x, y, seed);
  opt_.step(replica_.compute_params(), replica_.compute_grads(), lr);
  return loss;
}

lr_schedule make_schedule(const local_train_config& cfg, std::int64_t n) {
  const std::int64_t steps_per_epoch = (n + cfg.batch_size - 1) / cfg.batch_size;
  lr_schedule s;
  s.kind = cfg.schedule;
  s.base = cfg.lr;
  s.total_steps = std::max<std::int64_t>(1, steps_per_epoch * cfg.epochs);
  s.warmup_steps = static_cast<std::int64_t>(std::llround(cfg.warmup_epochs * steps_per_epoch));
  return s;
}

expected<train_result> train_local(const local_train_config& cfg, const dataset_split& data, const train_callbacks& cb,
                                   const compute& c) {
  auto spec = parse_model_spec(cfg.model);
  if (!spec) return spec.error();
  auto built = model::build(*spec, data.train.sample_shape(), data.train.num_classes);
  if (!built) return built.error();
  const model& m = *built;
  if (auto bad = labels_mismatch(m, data.train)) return *bad;
  const std::int64_t n = data.train.size(), batch = cfg.batch_size;
  if (n == 0) return failure{"the training set is empty"};
  auto aug = parse_augmentation(cfg.augment);
  if (!aug) return aug.error();
  if (auto bad = augmentation_unfit(*aug, data.train)) return *bad;
  const float background = -data.pixel_mean / data.pixel_std;  // a blank pixel, normalised

  const lr_schedule schedule = make_schedule(cfg, n);
  local_stepper stepper(m, cfg.optimizer, batch, cfg.seed, c, cfg.init);
  if (!cfg.initial_params.empty()) {
    if (cfg.initial_params.type() != dtype::f32 || cfg.initial_params.numel() != m.num_params())
      return failure{"the initial parameters number " + std::to_string(cfg.initial_params.numel()) + " where model " +
                     m.name() + " has " + std::to_string(m.num_params())};
    stepper.load_params(cfg.initial_params);
  }
  tensor xb(data.train.sample_shape().prepend(batch));
  tensor yb(data.train.labels.sizes().drop_front().prepend(batch), dtype::i32);

  train_result result;
  result.model = m.name();
  const std::int64_t steps_per_epoch = (n + batch - 1) / batch;
  std::int64_t step = 0, samples_done = 0;
  double train_seconds = 0.0;
  for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
    const auto order = epoch_indices(n, cfg.seed, epoch, 0, 1);
    const auto t_epoch = clock_type::now();
    double loss_sum = 0.0;
    for (std::int64_t s = 0; s < steps_per_epoch; ++s, ++step) {
      const std::int64_t start = s * batch, b = std::min(batch, n - start);
      const auto rows = std::span<const std::int64_t>(order).subspan(start, b);
      gather_batch(xb.view().slice(0, b), yb.view().slice(0, b), data.train, rows);
      augment_images(xb.view().slice(0, b), *aug, rows, cfg.seed, epoch, background);
      shift_windows(xb.view().slice(0, b), yb.view().slice(0, b), *aug, rows, data.train, cfg.seed, epoch);
      const double loss = stepper.step(xb.view().slice(0, b), yb.view().slice(0, b), schedule.at(step),
                                       derive_seed(cfg.seed, {static_cast<std::uint64_t>(step)}));
      if (!std::isfinite(loss))
        return failure{"the training loss became " + std::to_string(loss) + " at epoch " + std::to_string(epoch + 1) +
                       ", step " + std::to_string(s + 1) + "; the run diverged. Lower --lr (now " +
                       std::to_string(cfg.lr) + ") or lengthen --warmup-epochs"};
      loss_sum += loss;
      samples_done += b;
      if (cb.on_step)
        cb.on_step({epoch, s + 1, steps_per_epoch, samples_done, train_seconds + seconds_since(t_epoch), loss});
    }
    const double epoch_seconds = seconds_since(t_epoch);
    train_seconds += epoch_seconds;
    const eval_result ev = evaluate(m, stepper.params(), data.test, 1000, c, &data.train);
    epoch_report rep;
    rep.epoch = epoch;
    rep.train_loss = loss_sum / static_cast<double>(steps_per_epoch);
    rep.epoch_seconds = epoch_seconds;
    rep.samples_per_second = static_cast<double>(n) / epoch_seconds;
    rep.test_accuracy = ev.accuracy;
    rep.test_loss = ev.loss;
    rep.lr = schedule.at(step - 1);
    if (cb.on_epoch) cb.on_epoch(rep);
    result.test_accuracy = ev.accuracy;
    result.test_loss = ev.loss;
    result.final_train_loss = rep.train_loss;
  }
  result.epochs = cfg.epochs;
  result.train_seconds = train_seconds;
  result.samples_per_second = train_seconds > 0 ? static_cast<double>(samples_done) / train_seconds : 0.0;
  result.params = stepper.take_params();
  return result;
}

}  // namespace troupe
