// bench_compute: Troupe's single-process training step throughput for one model, on
// in-memory synthetic batches (or the fortunes text, for gpt), with the optimizer compute_vs_pytorch gives the peers.
// --device cuda runs the step on the GPU (the optimizer stays on the host; exit 3 with the
// reason when the device cannot be opened).
// Prints one JSON line: {"model", "batch_size", "threads", "device", "steps", "samples_per_second"}.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>
#include <optional>
#include <utility>

#include "tensor/backend.hpp"
#include "tensor/compute.hpp"
#include "tensor/gemm.hpp"
#include "train/dataset.hpp"
#include "train/sampler.hpp"
#include "train/trainer.hpp"

namespace {

// Runs `warmup` untimed steps, then `steps` timed ones, on batches of `data` in order;
// returns the last loss and the timed seconds.
std::pair<double, double> time_steps(const troupe::model& m, const troupe::dataset_split& data, std::int64_t batch,
                                     std::int64_t warmup, std::int64_t steps, const troupe::compute& exec) {
  using namespace troupe;
  // The peers run SGD with Nesterov momentum 0.9 and weight decay 5e-4 at a fixed lr.
  local_stepper stepper(m, optimizer_config{optimizer_kind::sgd, 0.9f, true, 5e-4f}, batch, 1, exec);
  tensor x(data.train.sample_shape().prepend(batch)), y(data.train.labels.sizes().drop_front().prepend(batch), dtype::i32);
  const auto order = epoch_indices(data.train.size(), 1, 0, 0, 1);
  const std::int64_t batches = data.train.size() / batch;
  auto run = [&](std::int64_t n) {
    double loss = 0.0;
    for (std::int64_t s = 0; s < n; ++s) {
      gather_batch(x, y, data.train, std::span<const std::int64_t>(order).subspan((s % batches) * batch, batch));
      loss = stepper.step(x, y, 0.01f);
    }
    return loss;
  };
  run(warmup);
  const auto t0 = std::chrono::steady_clock::now();
  const double loss = run(steps);
  return {loss, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace troupe;
  std::string model_name = "mlp";
  std::int64_t batch = 128, steps = 300, warmup = 20;
  int threads = 1;
  std::string device_text = "cpu", data_name = "synthetic", precision_name = "fp32";
  std::int64_t context = 256;
  CLI::App app{"Time Troupe's training step (forward, backward, SGD) on synthetic data or a text"};
  app.add_option("--model", model_name)->capture_default_str();
  app.add_option("--batch-size", batch)->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--steps", steps, "Timed steps")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--device", device_text, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--precision", precision_name, "fp32, or bf16 products (CPU)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--data", data_name, "synthetic (images) or fortunes (text, for gpt)")->capture_default_str();
  app.add_option("--context", context, "fortunes: characters a sample")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto dev = parse_device(device_text);
  if (!dev) {
    std::cerr << dev.error().message << "\n";
    return 2;
  }
  std::optional<backend_context> backend;
  compute exec;
  if (dev->kind != device_kind::cpu) {
    auto b = backend_context::open(*dev);
    if (!b) {
      std::cerr << "bench_compute: --device " << device_text << ": " << b.error().message << "\n";
      return 3;
    }
    backend.emplace(std::move(b).value());
    exec = compute(*backend);
  }

  if (precision_name != "fp32" && !exec.host_memory()) {
    std::cerr << "bench_compute: --precision " << precision_name << " computes on the CPU only\n";
    return 2;
  }
  exec.set_precision(*precision_from_name(precision_name));
  set_blas_threads(threads);
  auto loaded = data_name == "synthetic"
                    ? expected<dataset_split>(make_synthetic(std::max<std::int64_t>(batch * 16, 2048), 1, 1))
                    : load_dataset(data_name, "", 0, 1, context);
  if (!loaded) {
    std::cerr << loaded.error().message << "\n";
    return 2;
  }
  const dataset_split& data = *loaded;
  auto spec = parse_model_spec(model_name);
  if (!spec) {
    std::cerr << spec.error().message << "\n";
    return 2;
  }
  auto m = model::build(*spec, data.train.sample_shape(), data.train.num_classes);
  if (!m) {
    std::cerr << m.error().message << "\n";
    return 2;
  }
  const auto [loss, secs] = time_steps(*m, data, batch, warmup, steps, exec);
  nlohmann::ordered_json out;
  out["model"] = m->name();
  out["batch_size"] = batch;
  out["threads"] = threads;
  out["device"] = to_string(*dev);
  out["precision"] = precision_name;
  out["steps"] = steps;
  out["samples_per_second"] = static_cast<double>(steps * batch) / secs;
  out["final_loss"] = loss;
  std::cout << out.dump() << std::endl;
  return 0;
}
