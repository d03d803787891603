// launch: plan the nodes, prepare the job directory (job.toml, CA, certificates), start
// everything, stream the logs with role prefixes, print the job's JSON line, and exit
// with the job's status.
#include "tools/cmd_launch.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>

#include "core/job_checkpoint.hpp"
#include "net/launch_plan.hpp"
#include "monitoring/trace.hpp"
#include "tools/config_file.hpp"
#include "tools/job_cli.hpp"
#include "tools/model_export.hpp"
#include "tools/job_dirs.hpp"
#include "tools/launch_report.hpp"
#include "tools/launch_restarts.hpp"
#include "tools/observe_cli.hpp"
#include "tools/port_reservation.hpp"

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
  std::string save_model;  // passed to the coordinator, which holds the final parameters
  std::vector<std::string> command;  // after --: the workers of a key-value job
  int max_restarts = 3;              // Note [Restarting a job]
  std::uint32_t min_workers = 0;     // Note [Leaving out lost workers]; 0: not elastic
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

int run_launch(launch_cli& o) {
  if (o.local == !o.hostfile.empty()) {
    print_error("launch needs exactly one of --local and --hostfile FILE");
    return exit_usage;
  }
  if (!o.command.empty()) o.job.job.kv = true;  // the workers are the user's program
  std::vector<host_entry> hosts;
  if (!o.local) {
    auto parsed = parse_hostfile(o.hostfile);
    if (!parsed) {
      print_error(parsed.error().message);
      return exit_usage;
    }
    hosts = std::move(*parsed);
    // The host file's slots are how many worker processes each host takes (as Horovod's
    // and DeepSpeed's host files say): without --workers, one per slot (a pipeline job:
    // one replica per `stages` slots).
    if (o.app->get_option("--workers")->count() == 0) {
      std::uint32_t slots = 0;
      for (const auto& h : hosts) slots += h.slots;
      const std::uint32_t stages = std::max<std::uint32_t>(1, o.job.job.pipeline_stages);
      if (slots % stages != 0) {
        print_error("--hostfile " + o.hostfile + " has " + std::to_string(slots) + " slots, which do not make whole "
                    "replicas of " + std::to_string(stages) + " pipeline stages; give --workers (replicas) or change "
                    "the slots");
        return exit_usage;
      }
      o.job.job.workers = slots / stages;
    }
  }
  auto job = resolve_job_options(o.job);
  if (!job) {
    print_error(job.error().message);
    return exit_usage;
  }
  if (!o.observe.trace.empty() && o.local)
    if (auto why = trace_unwritable(o.observe.trace)) {
      print_error(*why);
      return exit_usage;
    }
  if (auto why = elastic_refusal(*job, o.min_workers, o.max_restarts)) {
    print_error(*why);
    return exit_usage;
  }
  if (auto why = train_options_unfit(o.job.train, !o.command.empty())) {
    print_error(*why);
    return exit_usage;
  }
  std::string save_model = o.save_model;  // where the coordinator writes it: on its own host over ssh
  if (!save_model.empty()) {
    if (job->kv || job->simulate_compute_ms > 0) {
      print_error(std::string("--save-model: ") +
                  (job->kv ? "a key-value job's model is its members' own; they save it"
                           : "a job with --simulate-compute trains no real parameters") +
                  "; leave --save-model out");
      return exit_usage;
    }
    if (o.local) {
      if (auto why = save_model_unwritable(save_model)) {
        print_error(*why);
        return exit_usage;
      }
      save_model = std::filesystem::absolute(save_model).string();
    }
  }
  launch_request req;
  req.worker_command = o.command;
  req.servers = job->servers;
  req.workers = members(*job);  // a process per worker, or per pipeline stage of each replica
  req.job_id = "job-" + random_hex(6);
  if (!o.job.resume.empty()) {  // the checkpoints' job goes on (read here: DIR must be reachable from this host too)
    auto id = checkpointed_job_id(o.job.resume);
    if (!id) {
      print_error("--resume " + o.job.resume + ": " + id.error().message);
      return exit_usage;
    }
    req.job_id = *id;
  }
  req.tls = !o.insecure_network;
  auto num = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  req.node_flags = {"--heartbeat", num(o.heartbeat_s), "--connection-timeout", num(o.connection_timeout_s)};
  req.shared_memory = !o.no_shared_memory;
  if (o.no_shared_memory) req.node_flags.push_back("--no-shared-memory");
  if (o.no_doorbells) req.node_flags.push_back("--no-doorbells");
  req.bulk_lanes = !o.no_bulk_lanes;
  if (o.no_bulk_lanes) req.node_flags.push_back("--no-bulk-lanes");
  req.job_toml = job_options_as_toml(*o.app);
  if (job->kv && o.app->get_option("--kv")->count() == 0) req.job_toml += "kv = true\n";
  for (const char* key : {"workers", "servers"})
    if (o.app->get_option(std::string("--") + key)->count() == 0)
      req.job_toml += std::string(key) + " = " + std::to_string(key[0] == 'w' ? job->workers : job->servers) + "\n";
  // Metrics: a port per node (free ones locally, 9400 + n over ssh), listed in a
  // Prometheus configuration for the job. Trace: a file per node, merged at the end.
  std::vector<scrape_target> targets;
  std::vector<std::string> traces;
  std::uint16_t next_remote_metrics = 9400;
  std::map<std::string, int> workers_on_host;
  // Local ports stay reserved until launch returns (see port_reservation.hpp).
  std::vector<port_reservation> reserved;
  std::string reservation_error;
  auto reserve = [&]() -> std::uint16_t {
    auto r = port_reservation::on_loopback();
    if (!r) {
      reservation_error = r.error().message;
      return 0;
    }
    reserved.push_back(std::move(*r));
    return reserved.back().port();
  };
  req.per_node_flags = [&](const std::string& node, const std::string& host) {
    std::vector<std::string> flags;
    if (o.observe.metrics == "off") {
      flags = {"--metrics", "off"};
    } else {
      const std::string at = o.local ? "127.0.0.1:" + std::to_string(reserve())
                                     : "0.0.0.0:" + std::to_string(next_remote_metrics);
      flags = {"--metrics", at, "--metrics-linger", num(o.observe.metrics_linger_s)};
      targets.push_back({node, o.local ? at : host + ":" + std::to_string(next_remote_metrics)});
      ++next_remote_metrics;
    }
    if (!o.observe.trace.empty()) {
      const std::string file = (o.local ? req.job_dir : req.remote_dir) + "/trace-" + node + ".json";
      flags.insert(flags.end(), {"--trace", file, "--trace-events", std::to_string(o.observe.trace_events)});
      traces.push_back(file);
    }
    if (node == "coordinator" && !save_model.empty()) flags.insert(flags.end(), {"--save-model", save_model});
    // The device is each worker node's own choice; the coordinator and shards ignore it.
    // `--device cuda` spreads a host's workers over its GPUs: the k-th worker on a host
    // gets cuda:k (one that asks for a GPU the host lacks fails with that message).
    if (node.rfind("worker-", 0) == 0 && o.job.train.device != "cpu") {
      const std::string d = o.job.train.device == "cuda" ? "cuda:" + std::to_string(workers_on_host[host]++)
                                                          : o.job.train.device;
      flags.insert(flags.end(), {"--device", d});
      if (o.job.train.tf32) flags.push_back("--tf32");
    }
    if (node.rfind("worker-", 0) == 0 && o.job.train.precision != "fp32")
      flags.insert(flags.end(), {"--precision", o.job.train.precision});
    return flags;
  };
  // A dry run writes nothing, unless it is asked to keep the job directory (whose files its
  // commands name) for running them by hand.
  req.write_files = !o.dry_run || o.keep_job_dir;
  req.job_dir = o.job_dir;
  if (!req.job_dir.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(req.job_dir, ec) && !std::filesystem::is_empty(req.job_dir, ec)) {
      print_error("--job-dir " + req.job_dir + " exists and is not empty; launch fills its job directory with keys and "
                  "removes it at the end, so give a path that does not exist yet");
      return exit_usage;
    }
  } else if (!req.write_files) {
    req.job_dir = (std::filesystem::temp_directory_path() / ("troupe-" + req.job_id)).string();
  } else {
    const std::string tmp = std::filesystem::temp_directory_path().string();
    for (const auto& gone : sweep_job_dirs(tmp))
      std::cerr << "launch: removed " << gone << ", the job directory of a launcher that is gone" << std::endl;
    auto dir = make_job_dir(tmp, req.job_id);
    if (!dir) {
      print_error(dir.error().message);
      return exit_failed;
    }
    req.job_dir = *dir;
  }
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
  expected<launch_plan> plan = failure{""};
  if (o.local) {
    std::error_code ec;
    req.troupe_bin = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    req.port = o.port ? o.port : reserve();
    plan = plan_local_launch(req);
    if (plan && !reservation_error.empty()) plan = failure{reservation_error};
  } else {
    req.hosts = hosts;
    req.troupe_bin = o.troupe_bin;
    req.ssh = o.ssh;
    req.port = o.port ? o.port : 7070;
    req.remote_dir = o.remote_dir.empty() ? "/tmp/troupe-" + req.job_id : o.remote_dir;
    plan = plan_ssh_launch(req);
  }
  if (!plan) {
    print_error(plan.error().message);
    return exit_failed;
  }
  // The nodes' metrics addresses for Prometheus: in --prometheus-config FILE, or in the
  // job directory when it is kept (otherwise it would vanish with the job).
  if (!targets.empty() && req.write_files && (o.keep_job_dir || !o.prometheus_config.empty())) {
    const std::string path = o.prometheus_config.empty() ? req.job_dir + "/prometheus.yml" : o.prometheus_config;
    std::ofstream out(path);
    out << prometheus_config(req.job_id, targets);
    out.close();
    if (!out) {
      print_error("--prometheus-config: cannot write " + path + "; give a file in a writable directory");
      return exit_usage;
    }
    std::cerr << "launch: Prometheus configuration for this job in " << path << std::endl;
  }
  if (o.dry_run) {
    print_dry_run(*plan, req, o.keep_job_dir);
    return exit_ok;
  }
  std::cerr << "launch: job " << req.job_id << ", " << plan->nodes.size() << " processes ("
            << (o.local ? "local" : "ssh") << "), " << (req.tls ? "mutual TLS with a private CA" : "plain TCP (--insecure-network)")
            << ", job directory " << req.job_dir << std::endl;
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
  } teardown_guard{plan->teardown, o.keep_job_dir};
  for (const auto& step : plan->setup)
    if (int rc = run_step(step.name, step.argv); rc != 0) {
      print_error(step.name + " failed (" + shell_quote(step.argv) + " exited with " + std::to_string(rc) + ")");
      return exit_failed;
    }
  // A node whose metrics are being scraped may linger for one last scrape after its job
  // (--metrics-linger); the grace covers that.
  restart_policy policy;
  policy.checkpoints = job->checkpoints.dir.empty() ? o.job.resume : job->checkpoints.dir;
  policy.max_restarts = o.max_restarts;
  policy.min_workers = o.min_workers;
  policy.replicas = job->workers;
  policy.stages = job->pipeline_stages;
  policy.workers_end_the_job = !req.worker_command.empty();
  policy.grace = std::chrono::seconds(15) +
                 std::chrono::milliseconds(static_cast<std::int64_t>(o.observe.metrics_linger_s * 1000));
  respawn_lost_nodes(plan->nodes, *job, policy);
  const attempts run = run_with_restarts(plan->nodes, policy);
  const group_result& g = run.last;
  const launch_outcome outcome =
      report_outcome(g, run.restarts, job->kv, o.min_workers > 0 ? &run.left_out : nullptr, o.job.train.precision);
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
  return outcome.others_failed > 0 || !traced ? exit_failed : exit_ok;
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
  app->add_option("--job-dir", o->job_dir, "Where job.toml and the certificates go (default: a fresh temporary directory)")
      ->group(g);
  app->add_flag("--keep-job-dir", o->keep_job_dir, "Keep the job directory after the job")->group(g);
  app->add_option("--remote-dir", o->remote_dir, "ssh: the job directory on each host (default /tmp/troupe-JOBID)")->group(g);
  app->add_option("--troupe", o->troupe_bin, "ssh: the troupe binary on the remote hosts")->capture_default_str()->group(g);
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
                  "shard server, is started again alone, at most N times each, and the others wait for it")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str()
      ->group(g);
  app->add_option("--min-workers", o->min_workers,
                  "--mode allreduce with --checkpoint-dir: elastic, as Horovod's --min-np. A worker lost for good "
                  "(its process killed, its host gone) is left out and the ring re-forms from the survivors, "
                  "rolled back to the newest checkpoint, while at least N replicas remain; 0: start it again")
      ->check(CLI::Range(0u, 1048576u))
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
