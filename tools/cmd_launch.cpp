// launch: plan the nodes, prepare the job directory (job.toml, CA, certificates), start
// everything, stream the logs with role prefixes, print the job's JSON line, and exit
// with the job's status. run_launch takes those steps in order; each step is a function
// of its own, and a step that cannot go on returns a refusal (the message and the exit
// code) instead of starting anything.
#include "tools/cmd_launch.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

#include "core/job_checkpoint.hpp"
#include "monitoring/trace.hpp"
#include "tools/launch_plan.hpp"
#include "tools/config_file.hpp"
#include "tools/job_cli.hpp"
#include "tools/job_dirs.hpp"
#include "tools/launch_node_flags.hpp"
#include "tools/launch_report.hpp"
#include "tools/launch_restarts.hpp"
#include "tools/model_export.hpp"
#include "tools/observe_cli.hpp"

namespace troupe::cli {

namespace {

struct launch_cli {
  bool local = false;
  std::string hostfile;
  bool dry_run = false;
  bool insecure_network = false;
  std::uint16_t port = 0;
  std::string job_dir;
  bool keep_job_dir = false;
  std::string remote_dir;
  std::string troupe_bin = "troupe";
  std::string ssh = "ssh";
  double heartbeat_s = 0.5, connection_timeout_s = 5.0;
  bool no_shared_memory = false;
  bool no_doorbells = false;
  bool no_bulk_lanes = false;
  job_cli_options job;
  observe_options observe;
  std::string prometheus_config;
  std::string save_model;            // passed to the coordinator, which holds the final parameters
  std::vector<std::string> command;  // after --: the workers of a key-value job
  int max_restarts = 3;              // Note [Restarting a job]
  CLI::App* app = nullptr;
};

std::string random_hex(int bytes) {
  std::random_device rd;
  std::string out;
  const char* digits = "0123456789abcdef";
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xff;
    out += digits[v >> 4];
    out += digits[v & 15];
  }
  return out;
}

// Why the command line cannot start a job (the caller exits with `code`).
struct refusal {
  std::string why;
  int code = exit_usage;
};

int refuse(const refusal& r) {
  print_error(r.why);
  return r.code;
}

// The hosts of --hostfile (none with --local). The host file's slots are how many worker
// processes each host takes (as Horovod's and DeepSpeed's host files say): without
// --workers, one per slot (a pipeline job: one replica per `stages` slots).
std::optional<refusal> read_hosts(launch_cli& o, std::vector<host_entry>& hosts) {
  if (o.local == !o.hostfile.empty()) return refusal{"launch needs exactly one of --local and --hostfile FILE"};
  if (o.local) return std::nullopt;
  auto parsed = parse_hostfile(o.hostfile);
  if (!parsed) return refusal{parsed.error().message};
  hosts = std::move(*parsed);
  if (o.app->get_option("--workers")->count() > 0) return std::nullopt;
  std::uint32_t slots = 0;
  for (const auto& h : hosts) slots += h.slots;
  const std::uint32_t stages = std::max<std::uint32_t>(1, o.job.job.pipeline_stages);
  if (slots % stages != 0)
    return refusal{"--hostfile " + o.hostfile + " has " + std::to_string(slots) +
                   " slots, which do not make whole replicas of " + std::to_string(stages) +
                   " pipeline stages; give --workers (replicas) or change the slots"};
  o.job.job.workers = slots / stages;
  return std::nullopt;
}

// What the resolved job and the launcher's own flags cannot do together, checked before
// anything is written. `save_model` becomes the path the coordinator writes to.
std::optional<refusal> refusal_of(const launch_cli& o, const job_spec& job, std::string& save_model) {
  if (!o.observe.trace.empty() && o.local)
    if (auto why = trace_unwritable(o.observe.trace)) return refusal{*why};
  if (auto why = elastic_refusal(job, o.max_restarts)) return refusal{*why};
  if (auto why = train_options_unfit(o.job.train, !o.command.empty())) return refusal{*why};
  save_model = o.save_model;  // on the coordinator's own host over ssh
  if (save_model.empty()) return std::nullopt;
  if (auto why = save_model_pointless(job)) return refusal{*why};
  if (o.local) {
    if (auto why = save_model_unwritable(save_model)) return refusal{*why};
    save_model = std::filesystem::absolute(save_model).string();
  }
  return std::nullopt;
}

// The request's job: its id (the checkpoints' for --resume), transport, the flags every
// node gets, and job.toml.
std::optional<refusal> describe_job(const launch_cli& o, const job_spec& job, launch_request& req) {
  req.worker_command = o.command;
  req.servers = job.servers;
  req.workers = members(job);  // a process per worker, or per pipeline stage of each replica
  req.job_id = "job-" + random_hex(6);
  if (!o.job.resume.empty()) {  // the checkpoints' job goes on (read here: DIR must be reachable from this host too)
    auto id = checkpointed_job_id(o.job.resume);
    if (!id) return refusal{"--resume " + o.job.resume + ": " + id.error().message};
    req.job_id = *id;
  }
  req.tls = !o.insecure_network;
  req.node_flags = {"--heartbeat", flag_value(o.heartbeat_s), "--connection-timeout",
                    flag_value(o.connection_timeout_s)};
  req.shared_memory = !o.no_shared_memory;
  if (o.no_shared_memory) req.node_flags.push_back("--no-shared-memory");
  req.doorbells = !o.no_doorbells;
  if (o.no_doorbells) req.node_flags.push_back("--no-doorbells");
  req.bulk_lanes = !o.no_bulk_lanes;
  if (o.no_bulk_lanes) req.node_flags.push_back("--no-bulk-lanes");
  req.job_toml = job_options_as_toml(*o.app);
  if (job.kv && o.app->get_option("--kv")->count() == 0) req.job_toml += "kv = true\n";
  for (const char* key : {"workers", "servers"})
    if (o.app->get_option(std::string("--") + key)->count() == 0)
      req.job_toml += std::string(key) + " = " + std::to_string(key[0] == 'w' ? job.workers : job.servers) + "\n";
  return std::nullopt;
}

// Where the job directory goes: --job-dir (which must not exist yet or be empty), a path
// a dry run only names, or a fresh temporary directory (after sweeping those of
// launchers that are gone).
std::optional<refusal> choose_job_dir(const launch_cli& o, launch_request& req) {
  // A dry run writes nothing, unless it is asked to keep the job directory (whose files its
  // commands name) for running them by hand.
  req.write_files = !o.dry_run || o.keep_job_dir;
  req.job_dir = o.job_dir;
  if (!req.job_dir.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(req.job_dir, ec) && !std::filesystem::is_empty(req.job_dir, ec))
      return refusal{"--job-dir " + req.job_dir +
                     " exists and is not empty; launch fills its job directory with "
                     "keys and removes it at the end, so give a path that does not exist yet"};
    return std::nullopt;
  }
  if (!req.write_files) {
    req.job_dir = (std::filesystem::temp_directory_path() / ("troupe-" + req.job_id)).string();
    return std::nullopt;
  }
  const std::string tmp = std::filesystem::temp_directory_path().string();
  for (const auto& gone : sweep_job_dirs(tmp))
    std::cerr << "launch: removed " << gone << ", the job directory of a launcher that is gone" << std::endl;
  auto dir = make_job_dir(tmp, req.job_id);
  if (!dir) return refusal{dir.error().message, exit_failed};
  req.job_dir = *dir;
  return std::nullopt;
}

// The processes to start, with the job directory's files written (unless a dry run).
expected<launch_plan> plan_nodes(const launch_cli& o, launch_request& req, const std::vector<host_entry>& hosts,
                                 launch_node_flags& flags) {
  if (o.local) {
    std::error_code ec;
    req.troupe_bin = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    req.port = o.port ? o.port : flags.reserve();
    auto plan = plan_local_launch(req);
    if (plan && !flags.reservation_error().empty()) return failure{flags.reservation_error()};
    return plan;
  }
  req.hosts = hosts;
  req.troupe_bin = o.troupe_bin;
  req.ssh = o.ssh;
  req.port = o.port ? o.port : 7070;
  req.remote_dir = o.remote_dir.empty() ? "/tmp/troupe-" + req.job_id : o.remote_dir;
  return plan_ssh_launch(req);
}

// The nodes' metrics addresses for Prometheus: in --prometheus-config FILE, or in the job
// directory when it is kept (otherwise it would vanish with the job).
std::optional<refusal> write_scrape_config(const launch_cli& o, const launch_request& req,
                                           const std::vector<scrape_target>& targets) {
  if (targets.empty() || !req.write_files || (!o.keep_job_dir && o.prometheus_config.empty())) return std::nullopt;
  const std::string path = o.prometheus_config.empty() ? req.job_dir + "/prometheus.yml" : o.prometheus_config;
  std::ofstream out(path);
  out << prometheus_config(req.job_id, targets);
  out.close();
  if (!out) return refusal{"--prometheus-config: cannot write " + path + "; give a file in a writable directory"};
  std::cerr << "launch: Prometheus configuration for this job in " << path << std::endl;
  return std::nullopt;
}

// Runs the plan's setup, the nodes (started again as Note [Restarting a job] says) and
// its teardown, then reports the outcome and merges the trace; the launcher's exit code.
int run_nodes(const launch_cli& o, const job_spec& job, launch_plan& plan, const std::vector<std::string>& traces) {
  // The hosts' copies of the job directory hold the nodes' keys: they go however the job
  // ends, a failed setup included, unless the job directory is to be kept.
  struct run_on_exit {
    const std::vector<child_spec>& steps;
    bool keep;
    ~run_on_exit() {
      if (keep) return;
      for (const auto& step : steps)
        if (int rc = run_step(step.name, step.argv); rc != 0)
          std::cerr << "launch: could not remove the job directory on a host (" << shell_quote(step.argv)
                    << " exited with " << rc << "); remove it by hand, it holds the node's key\n";
    }
  } teardown_guard{plan.teardown, o.keep_job_dir};
  for (const auto& step : plan.setup)
    if (int rc = run_step(step.name, step.argv); rc != 0)
      return refuse(
          {step.name + " failed (" + shell_quote(step.argv) + " exited with " + std::to_string(rc) + ")", exit_failed});
  restart_policy policy;
  policy.checkpoints = job.checkpoints.dir.empty() ? o.job.resume : job.checkpoints.dir;
  policy.max_restarts = o.max_restarts;
  policy.min_workers = job.mode == sync_mode::allreduce ? job.min_workers : 0;
  policy.replicas = job.workers;
  policy.stages = job.pipeline_stages;
  policy.workers_end_the_job = !o.command.empty();
  // A node whose metrics are being scraped may linger for one last scrape after its job
  // (--metrics-linger); the grace covers that.
  policy.grace = std::chrono::seconds(15) +
                 std::chrono::milliseconds(static_cast<std::int64_t>(o.observe.metrics_linger_s * 1000));
  respawn_lost_nodes(plan.nodes, job, policy);
  const attempts run = run_with_restarts(plan.nodes, policy);
  const group_result& g = run.last;
  const launch_outcome outcome =
      report_outcome(g, run.restarts, job.kv, policy.min_workers > 0 ? &run.left_out : nullptr, o.job.train.precision);
  bool traced = true;
  if (!o.observe.trace.empty() && o.local) {
    if (auto ok = monitoring::merge_traces(traces, o.observe.trace); !ok) {
      print_error(ok.error().message);
      traced = false;
    } else {
      std::cerr << "launch: trace of every node in " << o.observe.trace << std::endl;
    }
  }
  if (g.interrupted) return 130;
  if (outcome.coordinator_code != 0) return outcome.coordinator_code;
  // An elastic key-value job that ended well went on without its lost workers by design.
  const bool tolerated = (job.kv && job.min_workers > 0) || outcome.others_ended_well();
  return !tolerated || !traced ? exit_failed : exit_ok;
}

int run_launch(launch_cli& o) {
  std::vector<host_entry> hosts;
  if (auto r = read_hosts(o, hosts)) return refuse(*r);
  if (!o.command.empty()) o.job.job.kv = true;  // the workers are the user's program
  auto job = resolve_job_options(o.job);
  if (!job) return refuse({job.error().message});
  std::string save_model;
  if (auto r = refusal_of(o, *job, save_model)) return refuse(*r);
  launch_request req;
  if (auto r = describe_job(o, *job, req)) return refuse(*r);
  launch_node_flags flags({.local = o.local,
                           .metrics = o.observe.metrics,
                           .metrics_linger_s = o.observe.metrics_linger_s,
                           .trace = !o.observe.trace.empty(),
                           .trace_events = o.observe.trace_events,
                           .save_model = save_model,
                           .device = o.job.train.device,
                           .tf32 = o.job.train.tf32,
                           .precision = o.job.train.precision});
  req.per_node_flags = [&](const std::string& node, const std::string& host) {
    return flags.of(node, host, o.local ? req.job_dir : req.remote_dir);
  };
  if (auto r = choose_job_dir(o, req)) return refuse(*r);
  // The job directory holds the CA's key: it goes on every way out of this function, an
  // error before the job starts included, unless it is to be kept.
  struct remove_on_exit {
    std::string dir;
    bool keep;
    ~remove_on_exit() {
      std::error_code ec;
      if (!keep) std::filesystem::remove_all(dir, ec);
    }
  } job_dir_guard{req.job_dir, o.keep_job_dir || !req.write_files};
  auto plan = plan_nodes(o, req, hosts, flags);
  if (!plan) return refuse({plan.error().message, exit_failed});
  if (auto r = write_scrape_config(o, req, flags.targets())) return refuse(*r);
  if (o.dry_run) {
    print_dry_run(*plan, req, o.keep_job_dir);
    return exit_ok;
  }
  std::cerr << "launch: job " << req.job_id << ", " << plan->nodes.size() << " processes ("
            << (o.local ? "local" : "ssh") << "), "
            << (req.tls ? "mutual TLS with a private CA" : "plain TCP (--insecure-network)") << ", job directory "
            << req.job_dir << std::endl;
  return run_nodes(o, *job, *plan, flags.traces());
}

}  // namespace

command add_launch(CLI::App& parent) {
  auto o = std::make_shared<launch_cli>();
  CLI::App* app = parent.add_subcommand("launch", "Start a whole job as separate node processes, locally or over ssh");
  o->app = app;
  const char* g = "Launch";
  app->add_flag("--local", o->local, "Start every node on this machine")->group(g);
  app->add_option("--hostfile", o->hostfile, "Start the nodes over ssh on these hosts (one per line, optional slots=N)")
      ->group(g);
  app->add_flag("--dry-run", o->dry_run, "Print the exact commands instead of running them")->group(g);
  app->add_flag("--insecure-network", o->insecure_network,
                "Plain TCP instead of mutual TLS (only on an isolated, firewalled segment)")
      ->group(g);
  app->add_option("--port", o->port, "The coordinator's port (default: a free one locally, 7070 over ssh)")->group(g);
  app->add_option("--job-dir", o->job_dir,
                  "Where job.toml and the certificates go (default: a fresh temporary directory)")
      ->group(g);
  app->add_flag("--keep-job-dir", o->keep_job_dir, "Keep the job directory after the job")->group(g);
  app->add_option("--remote-dir", o->remote_dir, "ssh: the job directory on each host (default /tmp/troupe-JOBID)")
      ->group(g);
  app->add_option("--troupe", o->troupe_bin, "ssh: the troupe binary on the remote hosts")
      ->capture_default_str()
      ->group(g);
  app->add_option("--ssh", o->ssh, "ssh: the ssh command")->capture_default_str()->group(g);
  app->add_flag("--no-shared-memory", o->no_shared_memory,
                "Send every tensor over the network, even between nodes on one host (default: shared memory there)")
      ->group(g);
  app->add_flag("--no-doorbells", o->no_doorbells,
                "On one host, send the workers' pushes and pulls as actor messages through each node's network "
                "stack instead of through the shared memory's doorbells (default: doorbells)")
      ->group(g);
  app->add_flag("--no-bulk-lanes", o->no_bulk_lanes,
                "Send large tensors between hosts inside the actor messages instead of on lanes of their own (one "
                "more port per shard server)")
      ->group(g);
  app->add_option("--save-model", o->save_model,
                  "The coordinator writes the final parameters to FILE (on its host; see train --save-model for "
                  "the formats)")
      ->group(g);
  app->add_option("--max-restarts", o->max_restarts,
                  "With --checkpoint-dir: start a job that lost a node again from its newest checkpoint, at most N "
                  "times (0: never); a lost coordinator, and with --on-shard-loss recover (the default there) a lost "
                  "shard server, is started again alone, at most N times each, and the others wait for it (a "
                  "key-value job's: a lost shard server only, which restores its keys while the loops go on)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str()
      ->group(g);
  app->add_option("--heartbeat", o->heartbeat_s, "Seconds between heartbeats between nodes")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str()
      ->group(g);
  app->add_option("--connection-timeout", o->connection_timeout_s, "Drop a node silent for this many seconds")
      ->check(CLI::Range(0.05, 86400.0))
      ->capture_default_str()
      ->group(g);
  app->add_option("--prometheus-config", o->prometheus_config,
                  "Write the job's Prometheus scrape configuration here (default: JOB_DIR/prometheus.yml)")
      ->group(g);
  app->add_option("command", o->command,
                  "After --: a program that uses Troupe's client library, started --workers times as the job's "
                  "workers with the TROUPE_* environment that joins it (a key-value job)")
      ->group(g);
  add_job_options(*app, o->job);
  add_observe_options(*app, o->observe);
  add_config_option(*app);
  return {app, [o] { return run_launch(*o); }};
}

}  // namespace troupe::cli
