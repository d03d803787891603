// launch_report: what `launch` prints once it knows the outcome: the commands of a dry
// run, and after the job the JSON line, the processes that failed and the coordinator's
// exit code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/launch_plan.hpp"
#include "tools/process_group.hpp"
#include "tools/cli_common.hpp"

namespace troupe::cli {

// The commands a dry run would have run, on stdout, and what became of the job directory.
void print_dry_run(const launch_plan& plan, const launch_request& req, bool keep_job_dir);

struct launch_outcome {
  int coordinator_code = exit_failed;
  int others_failed = 0;
  // Of those, the workers; and the workers the job's result says it lost and went on
  // without (its JSON line's workers_lost).
  int workers_failed = 0;
  std::int64_t workers_lost = 0;
  // Whether the launch succeeds as far as the other processes go: none failed, or, in a
  // training job, only workers that the job counted lost and trained on without (it
  // deals a lost worker's samples to the others), so the coordinator's success is the
  // job's. A key-value job's workers are users' programs: one that died did not finish
  // its own work, so it fails the launch (unless the job is elastic, --min-workers).
  bool kv = false;
  bool others_ended_well() const {
    return others_failed == 0 || (!kv && others_failed == workers_failed && workers_failed <= workers_lost);
  }
};

// The job's JSON line on stdout (with the restarts and the processes started again alone,
// Note [Restarting a job], the workers an elastic job left out when `left_out` is given,
// Note [Leaving out lost workers], and a training job's workers' --precision when given),
// a line for each process that failed, and the coordinator's exit code.
launch_outcome report_outcome(const group_result& g, int restarts, bool kv,
                              const std::vector<std::string>* left_out = nullptr, std::string_view precision = {});

}  // namespace troupe::cli
