// train: the job's flags, the in-process job, its progress lines and the final JSON line.
#include "tools/cmd_train.hpp"

#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>

#include "actors/runtime.hpp"
#include "tensor/gemm.hpp"
#include "tools/job_cli.hpp"

namespace troupe::cli {

namespace {

int run_train(const job_cli_options& o) {
  auto spec = resolve_job_options(o);
  if (!spec) {
    print_error(spec.error().message);
    return exit_usage;
  }
  job_spec job = std::move(*spec);
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
  std::cerr << "train: " << describe(job, *shared) << "\n";
  spdlog::set_level(spdlog::level::warn);  // per-worker lines are for cluster nodes
  job_callbacks cb;
  cb.on_epoch = print_epoch;
  auto result = run_job_in_process(job, shared, cb);
  if (!result) {
    print_error(troupe::describe(result.error()));
    return exit_failed;
  }
  print_job_result(*result);
  return exit_ok;
}

}  // namespace

command add_train(CLI::App& parent) {
  auto o = std::make_shared<job_cli_options>();
  CLI::App* app = parent.add_subcommand(
      "train", "Train with a coordinator, shard servers and workers as actors in this process (the default job)");
  add_job_options(*app, *o);
  add_config_option(*app);
  return {app, [o] { return run_train(*o); }};
}

}  // namespace troupe::cli
