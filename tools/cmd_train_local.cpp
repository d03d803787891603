// train-local: flags, data loading, the training run and its final JSON line.
#include "tools/cmd_train_local.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>

#include "tensor/gemm.hpp"
#include "tensor/trainer.hpp"
#include "tools/progress.hpp"

namespace troupe::cli {

namespace {

struct train_local_options {
  local_train_config train;
  std::string optimizer = "sgd";
  std::string schedule = "cosine";
  data_options data;
  int threads = 1;
  bool show_model = false;
};

std::string describe(const local_train_config& c) {
  std::ostringstream s;
  s << name_of(c.optimizer.kind) << " lr " << c.lr << " (" << name_of(c.schedule) << ", warm-up " << c.warmup_epochs
    << " epochs)";
  if (c.optimizer.kind == optimizer_kind::sgd)
    s << ", momentum " << c.optimizer.momentum << ", nesterov " << (c.optimizer.nesterov ? "on" : "off");
  s << ", weight decay " << c.optimizer.weight_decay;
  return s.str();
}

double round_to(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

int run_train_local(const train_local_options& o) {
  local_train_config cfg = o.train;
  cfg.optimizer.kind = *parse_optimizer_kind(o.optimizer);
  cfg.schedule = *parse_lr_schedule_kind(o.schedule);
  set_blas_threads(o.threads);

  auto data = load_data(o.data, cfg.seed);
  if (!data) {
    print_error(data.error().message);
    return exit_failed;
  }
  std::cerr << "train-local: model " << cfg.model << ", " << data->train.size() << " training and "
            << data->test.size() << " test samples (" << data->train.name << "), " << cfg.epochs << " epochs, batch "
            << cfg.batch_size << ", " << describe(cfg) << ", seed " << cfg.seed << ", " << o.threads
            << " BLAS thread(s)\n";
  if (o.show_model) {
    auto spec = parse_model_spec(cfg.model);
    auto m = model::build(*spec, data->train.sample_shape(), data->train.num_classes);
    if (m) std::cerr << m->describe();
  }

  progress_printer progress(cfg.epochs, progress_printer::stderr_is_terminal());
  train_callbacks cb;
  cb.on_step = [&](const step_progress& p) { progress.on_step(p); };
  cb.on_epoch = [&](const epoch_report& r) { progress.on_epoch(r); };
  auto result = train_local(cfg, *data, cb);
  if (!result) {
    print_error(result.error().message);
    return exit_failed;
  }
  nlohmann::ordered_json out;
  out["test_accuracy"] = round_to(result->test_accuracy, 4);
  out["train_seconds"] = round_to(result->train_seconds, 3);
  out["samples_per_second"] = round_to(result->samples_per_second, 1);
  out["epochs"] = result->epochs;
  out["model"] = result->model;
  std::cout << out.dump() << std::endl;
  return exit_ok;
}

}  // namespace

command add_train_local(CLI::App& parent) {
  auto o = std::make_shared<train_local_options>();
  CLI::App* app = parent.add_subcommand("train-local", "Train in one process without actors (the local reference)");
  app->add_option("--model", o->train.model, std::string("Model: ") + std::string(model_spec_help))
      ->check(model_validator())
      ->capture_default_str();
  app->add_option("--epochs", o->train.epochs, "Passes over the training set")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app->add_option("--batch-size", o->train.batch_size, "Samples per step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--lr", o->train.lr, "Peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app->add_option("--momentum", o->train.optimizer.momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 0.9999))
      ->capture_default_str();
  app->add_option("--weight-decay", o->train.optimizer.weight_decay, "L2 weight decay")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app->add_flag("--nesterov,!--no-nesterov", o->train.optimizer.nesterov, "Nesterov momentum (sgd)")
      ->capture_default_str();
  app->add_option("--optimizer", o->optimizer, "Optimizer")
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  app->add_option("--lr-schedule", o->schedule, "Learning-rate schedule after warm-up")
      ->check(CLI::IsMember({"constant", "cosine", "linear"}))
      ->capture_default_str();
  app->add_option("--warmup-epochs", o->train.warmup_epochs, "Linear warm-up length in epochs")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  app->add_option("--seed", o->train.seed, "Seed for initialisation and shuffling")->capture_default_str();
  app->add_option("--threads", o->threads, "OpenBLAS threads")->check(CLI::Range(1, 256))->capture_default_str();
  app->add_flag("--show-model", o->show_model, "Print the layers before training");
  add_data_options(*app, o->data);
  add_config_option(*app);
  return {app, [o] { return run_train_local(*o); }};
}

}  // namespace troupe::cli
