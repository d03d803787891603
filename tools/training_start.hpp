// training_start: what `troupe train` and `troupe node --role coordinator` do alike to
// start a training job from its flags: load its data, build its model and cut it into
// stages (saying the cut), and find where it resumes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "tools/checkpoint_cli.hpp"
#include "tools/job_cli.hpp"

namespace troupe::cli {

struct training_start {
  std::shared_ptr<const dataset_split> data;
  model m;
  std::optional<resume_point> resume;  // none: a fresh start
};

// The job made ready (its cuts and derived sizes set in `job`), or the exit code once
// what is wrong has been said on stderr.
std::variant<training_start, int> start_training_job(job_spec& job, const job_cli_options& o);

}  // namespace troupe::cli
