// model_export: what the commands that write and read model files share (Note [Model
// files] in train/model_file.hpp): the --save-model flag, a path refused before training
// when it cannot be written, writing the final parameters, and a model file's parameters
// checked against the model the command builds for its data.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "base/expected.hpp"
#include "core/job.hpp"
#include "core/messages.hpp"
#include "train/model.hpp"

namespace troupe::cli {

void add_save_model_option(CLI::App& app, std::string& path);

// Why `path` cannot take --save-model's file (checked before any training); nullopt: it can.
std::optional<std::string> save_model_unwritable(const std::string& path);

// Why this job has no model of its own for --save-model to write (a key-value job's is
// its members', a simulated one trains none); nullopt: it has one.
std::optional<std::string> save_model_pointless(const job_spec& job);

// --save-model's refusals before a job starts: a job without a model of its own (exit
// code usage) or a file that cannot be written (failed), said on stderr; nothing when
// `path` may be written or is empty (not asked for).
std::optional<int> save_model_refused(const job_spec& job, const std::string& path);

// Writes the final parameters of `m` (built from `spec`) and says where on stderr; why not.
std::optional<std::string> export_model(const std::string& path, const std::string& spec, const model& m,
                                        const_tensor_view params, const nlohmann::json& source);

// What a model file says made it, for a job's final parameters.
nlohmann::json job_model_source(const std::string& command, const job_spec& job, const job_result& r);

// The parameters a model file (given with `flag`) holds for model `m`, or why they do not
// fit it (another model, input or class count).
expected<tensor> params_for(const std::string& flag, const std::string& path, const model& m);

}  // namespace troupe::cli
