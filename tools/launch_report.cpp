// What launch prints once it knows the outcome (see the header).
#include "tools/launch_report.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <string>
#include <vector>

namespace troupe::cli {

void print_dry_run(const launch_plan& plan, const launch_request& req, bool keep_job_dir) {
  for (const auto& s : plan.setup) std::cout << shell_quote(s.argv) << "\n";
  for (const auto& n : plan.nodes) std::cout << shell_quote(n.argv) << " &\n";
  if (!plan.teardown.empty()) std::cout << "wait\n";
  if (!keep_job_dir)
    for (const auto& s : plan.teardown) std::cout << shell_quote(s.argv) << "\n";
  if (keep_job_dir)
    std::cerr << "launch: dry run; the job directory " << req.job_dir << " holds job.toml"
              << (req.tls ? ", the CA and the node certificates" : "") << " for these commands\n";
  else
    std::cerr << "launch: dry run; nothing was written: the commands name a job directory that was not made "
                 "(add --keep-job-dir to make and keep it"
              << (req.tls ? ", with the CA and the node certificates," : "") << " and run them by hand)\n";
}

launch_outcome report_outcome(const group_result& g, int restarts, bool kv, const std::vector<std::string>* left_out,
                              std::string_view precision) {
  std::string json;
  for (const auto& line : g.collected)
    if (!line.empty() && line.front() == '{') json = line;
  launch_outcome r;
  r.kv = kv;
  auto out = nlohmann::ordered_json::parse(json.empty() ? "null" : json, nullptr, false);
  if (!out.is_discarded() && out.is_object() && out.contains("workers_lost") && out["workers_lost"].is_number_integer())
    r.workers_lost = out["workers_lost"].get<std::int64_t>();
  for (const auto& c : g.children) {
    if (c.name == "coordinator" && c.signal != 0 && !g.interrupted)
      print_error("the coordinator did not end after the job's other processes had (it hung or was stopped); "
                  "launch stopped it with signal " + std::to_string(c.signal));
    if (c.name == "coordinator") r.coordinator_code = c.exit_code < 0 ? exit_failed : c.exit_code;
    else if (c.exit_code != 0) {
      ++r.others_failed;
      if (c.name.rfind("worker", 0) == 0) ++r.workers_failed;
      std::cerr << "launch: " << c.name << " failed ("
                << (c.signal ? "signal " + std::to_string(c.signal) : "exit code " + std::to_string(c.exit_code)) << ")\n";
    }
  }
  if (r.others_failed > 0 && r.others_ended_well())
    std::cerr << "launch: the job went on without " << (r.workers_failed == 1 ? "that worker" : "those workers")
              << " (workers_lost " << r.workers_lost << ")\n";
  if (!json.empty()) {
    if (!out.is_discarded() && out.is_object()) {
      out["restarts"] = restarts;  // Note [Restarting a job]
      // Note [Restarting in place] (a key-value job's: Note [Replacing a key-value shard]):
      // the processes of the last attempt started again alone.
      auto respawned = nlohmann::ordered_json::object();
      for (const auto& c : g.children)
        if (c.respawned > 0) respawned[c.name] = c.respawned;
      out["respawned"] = respawned;
      if (left_out) out["workers_left_out"] = *left_out;
      // A coordinator does not know its workers' precision; a key-value job's workers are users' programs.
      if (!precision.empty() && !kv) out["precision"] = std::string(precision);
    }
    std::cout << (out.is_discarded() ? json : out.dump()) << std::endl;
  }
  return r;
}

}  // namespace troupe::cli
