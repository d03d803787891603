// train: flags (shared with train-local, plus the cluster's shape and mode), the
// in-process job, its progress lines and the final JSON line.
#include "tools/cmd_train.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <memory>

#include "actors/runtime.hpp"
#include "tensor/gemm.hpp"

namespace troupe::cli {

namespace {

struct train_cli_options {
  train_options train;
  data_options data;
  job_spec job;
  std::string mode = "async";
  std::string slow_worker;  // RANK:FACTOR
  double request_timeout_s = 300, stall_timeout_s = 120;
};

// Parses RANK:FACTOR; returns an error message or empty.
std::string parse_slow_worker(const std::string& text, std::int32_t& rank, double& factor) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return "--slow-worker: expected RANK:FACTOR (e.g. 3:4), got '" + text + "'";
  const std::string r = text.substr(0, colon), f = text.substr(colon + 1);
  auto [p1, e1] = std::from_chars(r.data(), r.data() + r.size(), rank);
  auto [p2, e2] = std::from_chars(f.data(), f.data() + f.size(), factor);
  if (e1 != std::errc() || p1 != r.data() + r.size() || rank < 0 || e2 != std::errc() || p2 != f.data() + f.size() ||
      !(factor >= 1.0))
    return "--slow-worker: expected RANK:FACTOR with RANK >= 0 and FACTOR >= 1 (e.g. 3:4), got '" + text + "'";
  return {};
}

void print_epoch(const epoch_summary& s) {
  std::fprintf(stderr, "epoch %d/%d: %.0f samples/s, train loss %.4f, staleness %.2f (max %lld)", s.epoch + 1,
               s.epochs, s.samples_per_second, s.train_loss, s.mean_staleness,
               static_cast<long long>(s.max_staleness));
  if (s.evaluated) std::fprintf(stderr, ", test accuracy %.2f%% (loss %.4f)", 100.0 * s.test_accuracy, s.test_loss);
  std::fprintf(stderr, ", %u workers, %.1f s\n", s.live_workers, s.seconds);
  std::fflush(stderr);
}

int run_train(train_cli_options& o) {
  job_spec job = o.job;
  job.train = resolve_train_options(o.train);
  job.mode = *parse_sync_mode(o.mode);
  job.dataset = o.data.dataset;
  job.data_dir = o.data.dir;
  job.train_samples = o.data.train_samples;
  job.request_timeout_ms = static_cast<std::int64_t>(o.request_timeout_s * 1000);
  job.stall_timeout_ms = static_cast<std::int64_t>(o.stall_timeout_s * 1000);
  if (!o.slow_worker.empty()) {
    if (auto err = parse_slow_worker(o.slow_worker, job.slow_worker, job.slow_factor); !err.empty()) {
      print_error(err);
      return exit_usage;
    }
  }
  set_blas_threads(1);  // one BLAS thread per worker; workers run in parallel

  auto data = load_data(o.data, job.train.seed);
  if (!data) {
    print_error(data.error().message);
    return exit_failed;
  }
  auto shared = std::make_shared<const dataset_split>(std::move(*data));
  if (auto m = prepare_job(job, *shared); !m) {
    print_error(m.error().message);
    return exit_usage;
  }
  std::cerr << "train: " << name_of(job.mode);
  if (job.mode == sync_mode::ssp) std::cerr << " (staleness bound " << job.staleness << ")";
  std::cerr << ", " << job.workers << " workers, " << job.servers << " shard servers, model " << job.train.model << ", "
            << job.train_size << " training samples (" << shared->train.name << "), " << job.train.epochs
            << " epochs, batch " << job.train.batch_size << " per worker, " << describe(job.train);
  if (job.simulate_compute_ms > 0) std::cerr << ", simulated compute " << job.simulate_compute_ms << " ms";
  if (job.slow_worker >= 0) std::cerr << ", worker " << job.slow_worker << " slowed " << job.slow_factor << "x";
  std::cerr << "\n";

  job_callbacks cb;
  cb.on_epoch = print_epoch;
  auto result = run_job_in_process(job, shared, cb);
  if (!result) {
    print_error(troupe::describe(result.error()));
    return exit_failed;
  }
  nlohmann::ordered_json out;
  out["mode"] = result->mode;
  out["workers"] = result->workers;
  out["servers"] = result->servers;
  out["epochs"] = result->epochs;
  out["test_accuracy"] = result->evaluated ? nlohmann::ordered_json(round_to(result->test_accuracy, 4)) : nullptr;
  out["train_seconds"] = round_to(result->train_seconds, 3);
  out["samples_per_second"] = round_to(result->samples_per_second, 1);
  out["steady_samples_per_second"] = round_to(result->steady_samples_per_second, 1);
  out["mean_staleness"] = round_to(result->mean_staleness, 3);
  out["max_staleness"] = result->max_staleness;
  out["workers_lost"] = result->workers_lost;
  out["rejected_messages"] = result->rejected;
  std::cout << out.dump() << std::endl;
  return exit_ok;
}

}  // namespace

command add_train(CLI::App& parent) {
  auto o = std::make_shared<train_cli_options>();
  o->train.train.epochs = o->job.train.epochs;
  CLI::App* app = parent.add_subcommand(
      "train", "Train with a coordinator, shard servers and workers as actors in this process (the default job)");
  add_train_options(*app, o->train);
  app->add_option("--workers", o->job.workers, "Workers (data-parallel replicas)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--servers", o->job.servers, "Parameter shard servers")->check(CLI::Range(1, 1024))->capture_default_str();
  app->add_option("--mode", o->mode, "Consistency: sync (one averaged update per round), async (apply on arrival), "
                                     "ssp (async with a staleness bound)")
      ->check(CLI::IsMember({"sync", "async", "ssp"}))
      ->capture_default_str();
  app->add_option("--staleness", o->job.staleness, "ssp: how many clocks a worker may run ahead of the slowest")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app->add_flag("--staleness-lr", o->job.staleness_lr, "async/ssp: scale the learning rate by 1 / max(1, staleness)");
  app->add_option("--big-array-bound", o->job.big_array_bound,
                  "Split parameter blocks above this many floats across shards (0 = automatic)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app->add_option("--simulate-compute", o->job.simulate_compute_ms,
                  "Replace forward/backward by a delay of this many ms and a synthetic gradient (benchmarks)")
      ->check(CLI::Range(0.0, 3600e3));
  app->add_option("--slow-worker", o->slow_worker, "RANK:FACTOR makes one worker FACTOR times slower (benchmarks)");
  app->add_option("--request-timeout", o->request_timeout_s, "Seconds any request to another actor may take")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  app->add_option("--stall-timeout", o->stall_timeout_s, "Fail the job after this many seconds without progress")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  add_data_options(*app, o->data);
  add_config_option(*app);
  return {app, [o] { return run_train(*o); }};
}

}  // namespace troupe::cli
