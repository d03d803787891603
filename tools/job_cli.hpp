// The job's flags (model, optimisation, data, the cluster's shape and mode), shared by
// `train`, `node --role coordinator` and `launch`, and the job's output (job_output.cpp):
// a progress line per epoch on stderr and the final JSON line on stdout.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "actors/coordinator.hpp"
#include "tools/cli_common.hpp"
#include "tools/text_report.hpp"

namespace troupe::cli {

// Option groups; `launch` forwards the options of these groups to the coordinator.
inline constexpr const char* group_model = "Model and optimisation";
inline constexpr const char* group_data = "Data";
inline constexpr const char* group_job = "Job";

struct job_cli_options {
  train_options train;
  data_options data;
  job_spec job;
  std::string mode = "async";
  std::string allreduce_op;  // empty: not given (sum)
  const CLI::Option* servers_option = nullptr;  // whether --servers was given (allreduce: 0 unless it was)
  std::string async_rule = "dana";
  std::string share_balance = "auto";
  std::string schedule = "1f1b";
  std::string balance = "time";
  std::string cuts;         // "2,4"
  std::string slow_worker;  // RANK:FACTOR
  std::string compression = "none";
  std::string pull_precision = "fp32";
  double request_timeout_s = 300, stall_timeout_s = 120;
  std::string resume;       // --resume DIR
};

void add_job_options(CLI::App& app, job_cli_options& o);
// The job spec the flags describe, or a usage error message.
expected<job_spec> resolve_job_options(const job_cli_options& o);
// Every option of the job groups that was given, as TOML key = "value" lines (what
// `launch` hands the coordinator).
std::string job_options_as_toml(CLI::App& app);

// The job in one line, for the operator: mode, cluster, data, optimizer and what the
// shards make of it (describe_update_rules).
std::string describe(const job_spec& job, const dataset_split& data);
// What the shards change of the optimizer for this job, or "": the lr past the critical
// batch in sync, the momentum (and lr) --async-rule uses in async and ssp.
std::string describe_update_rules(const job_spec& job);
// An epoch's line on stderr; a language model's (per_character) gives its validation loss
// in bits per character too.
void print_epoch(const epoch_summary& s, bool per_character);
// The job's outcome as one JSON line on stdout; a language model's (text) also has its
// bits per character and a sample of its text, which `who` prints on stderr too. A
// key-value job's has only what its coordinator knows (its members' loops are their
// own): mode, workers, servers, train_seconds (from the start to the last member's
// leaving), workers_lost.
// `precision` is the workers' --precision where the caller knows it (train); empty
// leaves it out (a coordinator does not know its workers').
void print_job_result(const job_result& r, const std::string& who, const text_output* text,
                      std::string_view precision = {});
void print_kv_job_result(const job_result& r);

}  // namespace troupe::cli
