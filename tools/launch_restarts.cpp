// launch_restarts: a lost node, the next attempt's --resume (Note [Restarting a job]), and
// the workers an elastic job leaves out (Note [Leaving out lost workers]).
#include "tools/launch_restarts.hpp"

#include <algorithm>
#include <iostream>
#include <optional>
#include <regex>
#include <string>

#include "core/checkpoint_store.hpp"
#include "tools/cli_common.hpp"

namespace troupe::cli {

namespace {

// ssh exits with 255 when the connection or the remote host is gone.
constexpr int ssh_lost = 255;

// A launched worker's name: "worker 2", or "worker 2 @host" over ssh.
struct worker_name {
  std::uint32_t index = 0;
  std::string at;  // " @host", or empty
};

std::optional<worker_name> parse_worker_name(const std::string& name) {
  static const std::regex worker(R"(^worker ([0-9]+)( @.*)?$)");
  std::smatch m;
  if (!std::regex_match(name, m, worker)) return std::nullopt;
  return worker_name{static_cast<std::uint32_t>(std::stoul(m[1].str())), m[2].str()};
}

// Puts `value` after `flag` in argv: in place of an earlier value (one argument each, or,
// for a number, inside an ssh command's one string), or at the end.
void set_flag(std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  if (auto at = std::find(argv.begin(), argv.end(), flag); at != argv.end() && at + 1 != argv.end()) {
    *(at + 1) = value;
    return;
  }
  const std::regex in_string(flag + " [0-9]+");
  for (auto& a : argv)
    if (std::regex_search(a, in_string)) {
      a = std::regex_replace(a, in_string, flag + " " + value);
      return;
    }
  argv.insert(argv.end(), {flag, value});
}

// "worker 1, worker 2".
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

bool lost_a_node(const group_result& g) {
  for (const auto& c : g.children)
    if ((c.signal != 0 && !c.stopped) || (c.name == "coordinator" && c.exit_code == exit_node_lost)) return true;
  return false;
}

void resume_next_attempt(std::vector<child_spec>& nodes, const std::string& dir) {
  if (checkpoint_store(dir, 1).complete().empty()) return;
  for (auto& n : nodes)
    if (n.name == "coordinator") set_flag(n.argv, "--resume", dir);
}

expected<left_out> leave_out_lost_workers(std::vector<child_spec>& nodes, const group_result& g,
                                          std::uint32_t replicas, std::uint32_t stages, std::uint32_t min_replicas) {
  stages = std::max<std::uint32_t>(1, stages);
  left_out out;
  std::vector<bool> lost_replica(replicas, false);
  for (const auto& c : g.children) {
    const auto w = parse_worker_name(c.name);
    if (!w || w->index / stages >= replicas) continue;
    if ((c.signal != 0 && !c.stopped) || c.exit_code == ssh_lost) {
      out.workers.push_back(c.name);
      lost_replica[w->index / stages] = true;
    }
  }
  if (out.workers.empty()) return out;
  out.replicas = static_cast<std::uint32_t>(std::count(lost_replica.begin(), lost_replica.end(), false));
  if (out.replicas < std::max<std::uint32_t>(1, min_replicas)) {
    return failure{joined(out.workers) + " lost for good, and " + std::to_string(out.replicas) + " of the job's " +
                   std::to_string(replicas) + " replicas survive, fewer than --min-workers " +
                   std::to_string(min_replicas) +
                   "; the job stops. Its checkpoints go on with --resume DIR (on as many workers as you have)"};
  }
  // The survivors in their order, numbered again from 0 (a replica's stages stay together).
  std::vector<child_spec> next;
  std::uint32_t renumbered = 0;
  for (auto& n : nodes) {
    const auto w = parse_worker_name(n.name);
    if (!w) {
      if (n.name == "coordinator") set_flag(n.argv, "--workers", std::to_string(out.replicas));
      next.push_back(std::move(n));
      continue;
    }
    if (w->index / stages < replicas && lost_replica[w->index / stages]) continue;
    n.name = "worker " + std::to_string(renumbered) + w->at;
    set_flag(n.argv, "--worker-index", std::to_string(renumbered));
    ++renumbered;
    next.push_back(std::move(n));
  }
  nodes = std::move(next);
  return out;
}

std::optional<std::string> elastic_refusal(const job_spec& job, int max_restarts) {
  if (job.min_workers == 0 || job.mode != sync_mode::allreduce) return std::nullopt;  // validate() checks the rest
  if (job.checkpoints.dir.empty())
    return "--min-workers: the survivors go on from the job's newest checkpoint; give --checkpoint-dir DIR";
  if (max_restarts == 0)
    return "--min-workers: each re-formed ring is a restart, and --max-restarts is 0; give --max-restarts N";
  return std::nullopt;
}

void respawn_lost_nodes(std::vector<child_spec>& nodes, const job_spec& job, const restart_policy& policy) {
  if (policy.checkpoints.empty() || policy.max_restarts == 0) return;
  job_spec as_run = job;
  if (as_run.checkpoints.dir.empty()) as_run.checkpoints.dir = policy.checkpoints;
  for (auto& n : nodes) {
    // A key-value job's workers are users' programs (no node flags), which do not join a
    // coordinator started again; a lost server is replaced while they go on (Note
    // [Replacing a key-value shard] in core/job_shard_replacement.cpp).
    if (job.kv) {
      if (n.name.rfind("server ", 0) == 0 && restarts_on_shard_loss(as_run)) n.respawns = policy.max_restarts;
      continue;
    }
    if (n.name == "coordinator") {
      n.respawns = policy.max_restarts;
      n.before_respawn = [dir = policy.checkpoints](child_spec& c) {
        std::vector<child_spec> one{c};
        resume_next_attempt(one, dir);
        c = std::move(one.front());
      };
      continue;
    }
    set_flag(n.argv, "--coordinator-timeout", coordinator_wait_s);
    if (n.name.rfind("server ", 0) == 0 && restarts_on_shard_loss(as_run)) n.respawns = policy.max_restarts;
  }
}

attempts run_with_restarts(std::vector<child_spec>& nodes, const restart_policy& p) {
  attempts out;
  std::uint32_t replicas = p.replicas;
  for (;;) {
    // Once these have all exited the job is over, and a coordinator that does not end
    // then is stopped: a key-value job's workers (nothing else can end it), or every node
    // of a training job (they leave when their coordinator hangs, which their heartbeats
    // tell).
    std::vector<std::string> enders;
    for (const auto& n : nodes)
      if (n.name != "coordinator" && (!p.workers_end_the_job || n.name.rfind("worker", 0) == 0))
        enders.push_back(n.name);
    out.last = run_process_group(nodes, "coordinator", p.grace, enders);
    const auto& g = out.last;
    const bool failed = std::any_of(g.children.begin(), g.children.end(),
                                    [](const child_result& c) { return c.name == "coordinator" && c.exit_code != 0; });
    if (!failed || g.interrupted || p.checkpoints.empty() || !lost_a_node(g) || out.restarts >= p.max_restarts)
      return out;
    std::string how = "starting every process again";
    if (p.min_workers > 0) {
      auto gone = leave_out_lost_workers(nodes, g, replicas, p.stages, p.min_workers);
      if (!gone) {
        print_error(gone.error().message);
        return out;
      }
      if (!gone->workers.empty()) {
        how = joined(gone->workers) + " lost for good: the ring re-forms from the " +
              (gone->replicas == 1 ? std::string("1 surviving replica,")
                                   : std::to_string(gone->replicas) + " surviving replicas, numbered again in their order,");
        replicas = gone->replicas;
        out.left_out.insert(out.left_out.end(), gone->workers.begin(), gone->workers.end());
      }
    }
    ++out.restarts;
    std::cerr << "launch: the job lost a node; " << how << " from the newest checkpoint in " << p.checkpoints
              << " (restart " << out.restarts << " of at most " << p.max_restarts << ")" << std::endl;
    resume_next_attempt(nodes, p.checkpoints);
  }
}

}  // namespace troupe::cli
