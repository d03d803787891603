// model_export: --save-model's flag, check and write; a model file's fit to a model.
#include "tools/model_export.hpp"

#include <iostream>

#include "base/durable_file.hpp"
#include "tools/cli_common.hpp"
#include "train/model_file.hpp"

namespace troupe::cli {

void add_save_model_option(CLI::App& app, std::string& path) {
  app.add_option("--save-model", path,
                 "Write the final parameters to FILE: Troupe's model file, which train-local --init-from and "
                 "troupe evaluate read, or NumPy's .npz (one array per parameter block) when FILE ends in .npz");
}

std::optional<std::string> save_model_pointless(const job_spec& job) {
  if (!job.kv && job.simulate_compute_ms <= 0) return std::nullopt;
  return std::string("--save-model: ") +
         (job.kv ? "a key-value job's model is its members' own; they save it"
                 : "a job with --simulate-compute trains no real parameters") +
         "; leave --save-model out";
}

std::optional<std::string> save_model_unwritable(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return "--save-model: " + path + " is a directory; give a file";
  auto probe = durable_file::create(path);  // dropped at once: nothing is written
  if (!probe) return "--save-model: " + probe.error().message + "; give a file in a writable directory";
  return std::nullopt;
}

std::optional<int> save_model_refused(const job_spec& job, const std::string& path) {
  if (path.empty()) return std::nullopt;
  if (auto why = save_model_pointless(job)) {
    print_error(*why);
    return exit_usage;
  }
  if (auto why = save_model_unwritable(path)) {
    print_error(*why);
    return exit_failed;
  }
  return std::nullopt;
}

std::optional<std::string> export_model(const std::string& path, const std::string& spec, const model& m,
                                        const_tensor_view params, const nlohmann::json& source) {
  if (auto why = save_model(path, spec, m, params, source)) return "--save-model: " + *why;
  std::cerr << "saved the model's " << m.num_params() << " parameters to " << path << std::endl;
  return std::nullopt;
}

nlohmann::json job_model_source(const std::string& command, const job_spec& job, const job_result& r) {
  return {{"command", command},         {"job_id", job.job_id},       {"mode", r.mode},
          {"workers", job.workers},     {"epochs", r.epochs},         {"seed", job.train.seed},
          {"test_accuracy", r.test_accuracy}};
}

expected<tensor> params_for(const std::string& flag, const std::string& path, const model& m) {
  auto saved = load_model(path);
  if (!saved) return failure{flag + ": " + saved.error().message};
  if (saved->input.str() != m.input_shape().str() || saved->classes != m.output_shape().numel())
    return failure{flag + ": " + path + " holds a model for inputs of shape " + saved->input.str() + " and " +
                   std::to_string(saved->classes) + " classes; this data has " + m.input_shape().str() + " and " +
                   std::to_string(m.output_shape().numel())};
  const model& built = *saved->net;
  bool same = built.num_params() == m.num_params() && built.blocks().size() == m.blocks().size();
  for (std::size_t i = 0; same && i < m.blocks().size(); ++i)
    same = built.blocks()[i].name == m.blocks()[i].name && built.blocks()[i].shape.str() == m.blocks()[i].shape.str();
  if (!same)
    return failure{flag + ": " + path + " holds model '" + saved->spec + "' (" + std::to_string(saved->params.numel()) +
                   " parameters), not this command's " + m.name() + " (" + std::to_string(m.num_params()) +
                   "); pass the --model it was trained with"};
  return std::move(saved->params);
}

}  // namespace troupe::cli
