// train-local: flags, data loading, the training run and its final JSON line.
#include "tools/cmd_train_local.hpp"

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tensor/backend.hpp"
#include "tensor/compute.hpp"
#include "tensor/gemm.hpp"
#include "tools/config_file.hpp"
#include "tools/model_export.hpp"
#include "tools/progress.hpp"
#include "tools/text_report.hpp"
#include "train/chance_watch.hpp"
#include "train/trainer.hpp"

namespace troupe::cli {

namespace {

struct train_local_options {
  train_options train;
  data_options data;
  int threads = 1;
  bool show_model = false;
  std::string save_model, init_from;
};

// Opens --device's backend into `backend` and points `exec` at it (the CPU's otherwise),
// with the chosen precision; false, and said, when the device cannot be opened.
bool open_device(const train_local_options& o, std::optional<backend_context>& backend, compute& exec) {
  if (const device d = chosen_device(o.train); d.kind != device_kind::cpu) {
    auto b = backend_context::open(d);
    if (!b) {
      print_error("--device " + to_string(d) + ": " + b.error().message);
      return false;
    }
    backend.emplace(std::move(b).value());
    if (o.train.tf32) backend->call("set_tf32", &troupe_backend_v1::set_tf32, 1);
    exec = compute(*backend);
  }
  exec.set_precision(chosen_precision(o.train));
  return true;
}

// Writes --save-model's file and prints the run's JSON line; the exit code.
int save_and_report(const train_local_options& o, const local_train_config& cfg, const model& m,
                    const dataset_split& data, const train_result& result, const chance_watch& chance) {
  if (!o.save_model.empty())
    if (auto why = export_model(o.save_model, cfg.model, m, result.params,
                                {{"command", "troupe train-local"},
                                 {"epochs", result.epochs},
                                 {"seed", cfg.seed},
                                 {"test_accuracy", result.test_accuracy},
                                 {"init_from", o.init_from}})) {
      print_error(*why);
      return exit_failed;
    }
  nlohmann::ordered_json out;
  out["test_accuracy"] = round_to(result.test_accuracy, 4);
  out["accuracy_at_chance_epoch"] = chance.first_chance_epoch() >= 0
                                        ? nlohmann::ordered_json(chance.first_chance_epoch() + 1)
                                        : nlohmann::ordered_json(nullptr);
  if (!data.vocabulary.empty())
    add_text_output(out, "train-local", result.test_loss, result.params,
                    {&m, &data.vocabulary, o.data.sample_chars, cfg.seed});
  out["train_seconds"] = round_to(result.train_seconds, 3);
  out["samples_per_second"] = round_to(result.samples_per_second, 1);
  out["epochs"] = result.epochs;
  out["model"] = result.model;
  out["precision"] = o.train.precision;
  std::cout << out.dump() << std::endl;
  return exit_ok;
}

int run_train_local(const train_local_options& o) {
  local_train_config cfg = resolve_train_options(o.train);
  cfg.augment = augment_text(o.data);
  if (!o.save_model.empty())
    if (auto why = save_model_unwritable(o.save_model)) {
      print_error(*why);
      return exit_failed;
    }
  if (auto why = train_options_unfit(o.train)) {
    print_error(*why);
    return exit_usage;
  }
  set_blas_threads(o.threads);
  std::optional<backend_context> backend;
  compute exec;
  if (!open_device(o, backend, exec)) return exit_failed;

  auto data = load_data(o.data, cfg.seed);
  if (!data) {
    print_error(data.error().message);
    return exit_failed;
  }
  std::cerr << "train-local: model " << cfg.model << ", " << data->train.size() << " training and " << data->test.size()
            << " test samples (" << data->train.name << "), " << cfg.epochs << " epochs, batch " << cfg.batch_size
            << ", " << describe(cfg) << ", seed " << cfg.seed << ", " << o.threads << " compute thread(s)"
            << describe_precision(o.train) << "\n";
  auto spec = parse_model_spec(cfg.model);
  auto m =
      spec ? model::build(*spec, data->train.sample_shape(), data->train.num_classes) : expected<model>(spec.error());
  if (!m) {
    print_error(m.error().message);
    return exit_failed;
  }
  if (o.show_model) std::cerr << m->describe();
  if (!o.init_from.empty()) {
    auto initial = params_for("--init-from", o.init_from, *m);
    if (!initial) {
      print_error(initial.error().message);
      return exit_failed;
    }
    cfg.initial_params = std::move(*initial);
    std::cerr << "train-local: starts from the parameters in " << o.init_from << "\n";
  }

  progress_printer progress(cfg.epochs, progress_printer::stderr_is_terminal());
  const bool text = !data->vocabulary.empty();
  progress.per_character(text);
  train_callbacks cb;
  cb.on_step = [&](const step_progress& p) { progress.on_step(p); };
  chance_watch chance;  // Note [Accuracy at chance]
  cb.on_epoch = [&](const epoch_report& r) {
    progress.on_epoch(r);
    if (auto why = chance.check(r.epoch, r.test_accuracy, r.train_loss, data->train.num_classes))
      std::cerr << "warning: " << *why << "\n";
  };
  auto result = train_local(cfg, *data, cb, exec);
  if (!result) {
    print_error(result.error().message);
    return exit_failed;
  }
  return save_and_report(o, cfg, *m, *data, *result, chance);
}

}  // namespace

command add_train_local(CLI::App& parent) {
  auto o = std::make_shared<train_local_options>();
  CLI::App* app = parent.add_subcommand("train-local", "Train in one process without actors (the local reference)");
  add_train_options(*app, o->train);
  app->add_option("--threads", o->threads, "Compute threads: the products (OpenBLAS, oneDNN) and the host loops")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app->add_flag("--show-model", o->show_model, "Print the layers before training");
  add_data_options(*app, o->data);
  add_config_option(*app);
  add_save_model_option(*app, o->save_model);
  app->add_option("--init-from", o->init_from,
                  "Start from the parameters in this model file (written by --save-model) instead of the seed's");
  return {app, [o] { return run_train_local(*o); }};
}

}  // namespace troupe::cli
