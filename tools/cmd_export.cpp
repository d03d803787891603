// export: the newest good checkpoint's shard files assembled into one model file, and one
// JSON line saying what was written.
#include "tools/cmd_export.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

#include "core/job_checkpoint.hpp"
#include "train/model_file.hpp"
#include "train/model_spec.hpp"

namespace troupe::cli {

namespace {

struct export_options {
  std::string checkpoint_dir, file;
};

int run_export(const export_options& o) {
  auto ckpt = read_checkpointed_model(o.checkpoint_dir);
  if (!ckpt) {
    print_error(o.checkpoint_dir + ": " + ckpt.error().message);
    return exit_failed;
  }
  for (const auto& why : ckpt->skipped) std::cerr << "warning: export passed over " << why << "\n";
  auto spec = parse_model_spec(ckpt->model);
  expected<model> m = spec ? model::build(*spec, shape(std::span<const std::int64_t>(ckpt->input_shape)), ckpt->classes)
                           : expected<model>(spec.error());
  if (!m || m->num_params() != ckpt->params.numel()) {
    print_error(o.checkpoint_dir + ": its model '" + ckpt->model + "' " +
                (m ? "has " + std::to_string(m->num_params()) + " parameters, not the checkpoint's " +
                         std::to_string(ckpt->params.numel())
                   : "cannot be built: " + m.error().message));
    return exit_failed;
  }
  const nlohmann::json source = {
      {"command", "troupe export"}, {"job_id", ckpt->job_id}, {"checkpoint", o.checkpoint_dir}, {"step", ckpt->step}};
  if (auto why = save_model(o.file, ckpt->model, *m, ckpt->params, source)) {
    print_error(*why);
    return exit_failed;
  }
  std::cerr << "export: checkpoint " << ckpt->step << " of job " << ckpt->job_id << " (model " << ckpt->model
            << ", " << m->num_params() << " parameters) written to " << o.file << "\n";
  nlohmann::ordered_json out;
  out["file"] = o.file;
  out["model"] = ckpt->model;
  out["job_id"] = ckpt->job_id;
  out["step"] = ckpt->step;
  out["parameters"] = m->num_params();
  std::cout << out.dump() << std::endl;
  return exit_ok;
}

}  // namespace

command add_export(CLI::App& parent) {
  auto o = std::make_shared<export_options>();
  CLI::App* app = parent.add_subcommand(
      "export", "Write the model of a job's newest good checkpoint (--checkpoint-dir) as a model file");
  app->add_option("checkpoint-dir", o->checkpoint_dir, "The job's checkpoint directory")->required();
  app->add_option("file", o->file,
                  "The model file to write: Troupe's format, or NumPy's .npz when the name ends in .npz")
      ->required();
  return {app, [o] { return run_export(*o); }};
}

}  // namespace troupe::cli
