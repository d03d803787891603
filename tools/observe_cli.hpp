// --metrics and --trace for every command that runs actors: starting the metric registry
// and its exposer, the trace timeline, and writing the trace at the end.
#pragma once

#include <optional>
#include <string>

#include "monitoring/observability.hpp"
#include "tools/cli_common.hpp"

namespace troupe::cli {

inline constexpr const char* group_observe = "Observability";

struct observe_options {
  std::string metrics = "auto";   // HOST:PORT, "off", or "auto" (the command's default)
  std::string trace;              // Chrome trace-event JSON file
  std::size_t trace_events = 200000;
  double metrics_linger_s = 15;   // Note [Job state and linger] in monitoring/metrics.cpp
  CLI::Option* metrics_flag = nullptr;
};

void add_observe_options(CLI::App& app, observe_options& o);

// Starts what the options ask for, after checking that the trace file can be written (so
// a job never trains only to lose its trace). `fallback` is the address "auto" means;
// when it was not asked for explicitly and its port is busy, any free port is used instead.
expected<observability> start_observability(const observe_options& o, const std::string& job_id,
                                            const std::string& fallback);

// Writes the trace (if any) for this process, sets troupe_job_state to finished or failed
// (`succeeded`) and lingers for a last scrape; false (and says why) when the trace could
// not be written.
bool finish_observability(const observability& obs, const observe_options& o, const std::string& process_name,
                          bool succeeded);

// What stops `path` from being written ("--trace: cannot write ..."); nullopt when it can
// be. A file the check creates is removed again.
std::optional<std::string> trace_unwritable(const std::string& path);

}  // namespace troupe::cli
