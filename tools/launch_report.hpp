// launch_report: what `launch` prints once it knows the outcome: the commands of a dry
// run, and after the job the JSON line, the processes that failed and the coordinator's
// exit code.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "net/launch_plan.hpp"
#include "net/process_group.hpp"
#include "tools/cli_common.hpp"

namespace troupe::cli {

// The commands a dry run would have run, on stdout, and what became of the job directory.
void print_dry_run(const launch_plan& plan, const launch_request& req, bool keep_job_dir);

struct launch_outcome {
  int coordinator_code = exit_failed;
  int others_failed = 0;
};

// The job's JSON line on stdout (with the restarts and the processes started again alone,
// Note [Restarting a job], the workers an elastic job left out when `left_out` is given,
// Note [Leaving out lost workers], and a training job's workers' --precision when given),
// a line for each process that failed, and the coordinator's exit code.
launch_outcome report_outcome(const group_result& g, int restarts, bool kv,
                              const std::vector<std::string>* left_out = nullptr, std::string_view precision = {});

}  // namespace troupe::cli
