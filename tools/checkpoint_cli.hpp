// checkpoint_cli: the checkpoint flags the job commands share (--checkpoint-dir,
// --checkpoint-every, --checkpoint-seconds, --keep-checkpoints, --checkpoint-fatal,
// --on-shard-loss, --resume), and what a
// command does with them before and after prepare_job (Note [Resuming a job]).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "core/job_checkpoint.hpp"

namespace troupe::cli {

// Adds the flags to `app` in `group`.
void add_checkpoint_options(CLI::App& app, checkpoint_plan& plan, std::string& resume, const char* group);

// Before prepare_job: a job resumed from `resume` (a checkpoint directory; empty: none)
// is the checkpoints' job: it takes their job id when it has none, and keeps its
// checkpoints there unless --checkpoint-dir says otherwise. The directories become
// absolute. Why not (another job's id, no checkpoint there).
std::optional<std::string> adopt_checkpointed_job(job_spec& job, const std::string& resume);

// After prepare_job: where the job resumes (telling stderr which newer checkpoints it
// passed over and why), or nullopt for a fresh job; why not, including a fresh job whose
// --checkpoint-dir already holds checkpoints it would mix with.
expected<std::optional<resume_point>> resume_point_for(const job_spec& job, const model& m, const std::string& resume);

}  // namespace troupe::cli
