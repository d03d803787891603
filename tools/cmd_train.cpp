// train: the job's flags, the in-process job, its progress lines and the final JSON line.
#include "tools/cmd_train.hpp"

#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>

#include "actors/runtime.hpp"
#include "tensor/gemm.hpp"
#include "tools/checkpoint_cli.hpp"
#include "tools/config_file.hpp"
#include "tools/job_cli.hpp"
#include "tools/model_export.hpp"
#include "tools/observe_cli.hpp"
#include "tools/training_start.hpp"

namespace troupe::cli {

namespace {

struct train_cli {
  job_cli_options job;
  observe_options observe;
  bool show_model = false;
  std::string job_id, save_model;
};

int run_train(const train_cli& t) {
  const job_cli_options& o = t.job;
  auto spec = resolve_job_options(o);
  if (!spec) {
    print_error(spec.error().message);
    return exit_usage;
  }
  job_spec job = std::move(*spec);
  if (!t.job_id.empty()) job.job_id = t.job_id;
  if (auto why = adopt_checkpointed_job(job, o.resume)) {
    print_error(*why);
    return exit_usage;
  }
  if (job.checkpoints.on_shard_loss == shard_loss::recover) {
    print_error("--on-shard-loss recover restarts a job once a shard server joins in the lost one's place, which "
                "takes shard servers in processes of their own: use troupe launch (or troupe node); troupe train's "
                "shards live and die with its one process");
    return exit_usage;
  }
  if (auto code = save_model_refused(job, t.save_model)) return *code;
  set_blas_threads(1);  // one BLAS thread per worker; workers run in parallel
  const device dev = chosen_device(o.train);
  if (auto why = train_options_unfit(o.train)) {
    print_error(*why);
    return exit_usage;
  }
  if (auto why = device_unusable(dev)) {
    print_error(*why);
    return exit_failed;
  }
  auto started = start_training_job(job, o);
  if (auto* code = std::get_if<int>(&started)) return *code;
  training_start& ready = std::get<training_start>(started);
  const std::shared_ptr<const dataset_split>& shared = ready.data;
  const model* m = &ready.m;
  const std::optional<resume_point>& resume = ready.resume;
  if (t.show_model) std::cerr << m->describe();  // the layer indices --cuts names
  std::cerr << "train: " << describe(job, *shared) << describe_precision(o.train) << "\n";
  spdlog::set_level(spdlog::level::warn);  // per-worker lines are for cluster nodes
  auto obs = start_observability(t.observe, job.job_id, "127.0.0.1:9464");
  if (!obs) {
    print_error(obs.error().message);
    return exit_usage;
  }
  job_callbacks cb;
  const bool text = !shared->vocabulary.empty();
  cb.on_epoch = [text](const epoch_summary& s) { print_epoch(s, text); };
  const compute_options how{dev, o.train.device == "cuda", o.train.tf32, chosen_precision(o.train)};
  auto result = run_job_in_process(job, shared, cb, *obs, how, resume);
  const bool traced = finish_observability(*obs, t.observe, "troupe train", static_cast<bool>(result));
  if (!result) {
    print_error(troupe::describe(result.error()));
    return exit_failed;
  }
  if (!t.save_model.empty())
    if (auto why = export_model(t.save_model, job.train.model, *m, result->params,
                                job_model_source("troupe train", job, *result))) {
      print_error(*why);
      return exit_failed;
    }
  const text_output language{&*m, &shared->vocabulary, o.data.sample_chars, job.train.seed};
  print_job_result(*result, "train", text ? &language : nullptr, o.train.precision);
  return traced ? exit_ok : exit_failed;
}

}  // namespace

command add_train(CLI::App& parent) {
  auto o = std::make_shared<train_cli>();
  CLI::App* app = parent.add_subcommand(
      "train", "Train with a coordinator, shard servers and workers as actors in this process (the default job)");
  add_job_options(*app, o->job);
  add_observe_options(*app, o->observe);
  add_config_option(*app);
  app->add_option("--job-id", o->job_id, "The job's name: the troupe_job label of its metrics (default: a fresh one)")
      ->check([](const std::string& id) -> std::string {
        if (id.empty() || id.size() > 128) return "a job id is 1 to 128 characters";
        for (unsigned char c : id)
          if (c <= ' ' || c == 0x7f) return "a job id holds no spaces or control characters";
        return {};
      });
  app->add_flag("--show-model", o->show_model, "Print the layers before training (their indices are what --cuts takes)");
  add_save_model_option(*app, o->save_model);
  return {app, [o] { return run_train(*o); }};
}

}  // namespace troupe::cli
