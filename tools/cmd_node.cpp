// node: the node's own flags (role, addresses, TLS, timeouts), the environment and Slurm,
// the security checks, then the role; the coordinator also takes every job flag.
#include "tools/cmd_node.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include "actors/runtime.hpp"
#include "core/loss_record.hpp"
#include "net/endpoint.hpp"
#include "net/node.hpp"
#include "tensor/gemm.hpp"
#include "tools/checkpoint_cli.hpp"
#include "tools/config_file.hpp"
#include "tools/job_cli.hpp"
#include "tools/model_export.hpp"
#include "tools/training_start.hpp"
#include "tools/observe_cli.hpp"

namespace troupe::cli {

namespace {

constexpr const char* group_node = "Node";

struct node_cli {
  node_options node;
  std::string role;
  job_cli_options job;
  observe_options observe;
  std::string save_model;  // the coordinator's: it holds the final parameters
  CLI::App* app = nullptr;
};

// Where --metrics auto serves: the node's listen port + 2000 on its listen host (the
// coordinator's 7070 becomes 9070), or any free port for a node without a fixed port.
std::string default_metrics_address(const node_plan& plan) {
  const std::string host = plan.listen.host == "0.0.0.0" || plan.listen.host == "::" ? plan.listen.host
                           : is_loopback(plan.listen.host)                          ? plan.listen.host
                                                                                    : "127.0.0.1";
  const bool fixed = plan.role != node_role::worker && plan.listen.port != 0 && plan.listen.port <= 63535;
  return host + ":" + std::to_string(fixed ? plan.listen.port + 2000 : 0);
}

std::string node_name(const node_plan& plan) { return "troupe node (" + std::string(name_of(plan.role)) + ")"; }

// Leaves without running CAF's shutdown, which can wait on connections that will never
// finish (a TLS handshake a stranger never completes); output is flushed first.
[[noreturn]] void leave(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  spdlog::default_logger()->flush();
  std::_Exit(code);
}

// A coordinator's job that failed: said, and its exit code (a lost node's, which launch
// restarts, or a plain failure).
int failed_job(const caf::error& e) {
  print_error(troupe::describe(e));
  const auto code = troupe_code(e);
  return code && is_node_loss(*code) ? exit_node_lost : exit_failed;
}

// A key-value job's coordinator (Note [Jobs of keys]).
int run_kv_coordinator(const node_plan& plan, const job_spec& job, node_cli& o, const observability& obs,
                       const std::function<int(int)>& if_stuck) {
  auto resume = resume_point_for(job, model::none(), o.job.resume);  // Note [Key-value checkpoints]
  if (!resume) {
    print_error(resume.error().message);
    return exit_failed;
  }
  const auto conclude = [](caf::expected<job_result>& result) {
    if (!result) return failed_job(result.error());
    print_kv_job_result(*result);
    return exit_ok;
  };
  const auto listening = [&](const endpoint& at) {
    std::cerr << "coordinator of key-value job " << job.job_id << " listening on " << at.str()
              << (plan.tls.any() ? " (mutual TLS)" : " (plain TCP)") << ": " << job.workers << " workers, "
              << job.servers << " shards, " << name_of(job.mode) << std::endl;
  };
  return run_coordinator_node(plan, job, model::none(), nullptr, {}, obs, listening,
                              coordinator_end{conclude, if_stuck}, *resume);
}

// A training job's coordinator: its data, model and cuts, and its result said and saved.
int run_training_coordinator(const node_plan& plan, job_spec& job, node_cli& o, const observability& obs,
                             const std::function<int(int)>& if_stuck) {
  set_blas_threads(1);
  auto started = start_training_job(job, o.job);
  if (auto* code = std::get_if<int>(&started)) return *code;
  training_start& ready = std::get<training_start>(started);
  const std::shared_ptr<const dataset_split>& shared = ready.data;
  const model* m = &ready.m;
  const std::optional<resume_point>& resume = ready.resume;
  job_callbacks cb;
  const bool text = !shared->vocabulary.empty();
  cb.on_epoch = [text](const epoch_summary& s) { print_epoch(s, text); };
  const auto conclude = [&](caf::expected<job_result>& result) {
    if (!result) return failed_job(result.error());
    if (!o.save_model.empty())
      if (auto why = export_model(o.save_model, job.train.model, *m, result->params,
                                  job_model_source("troupe node (coordinator)", job, *result))) {
        print_error(*why);
        return exit_failed;
      }
    const text_output language{&*m, &shared->vocabulary, o.job.data.sample_chars, job.train.seed};
    print_job_result(*result, "coordinator", text ? &language : nullptr);
    return exit_ok;
  };
  const auto listening = [&](const endpoint& at) {
    std::cerr << "coordinator of job " << job.job_id << " listening on " << at.str()
              << (plan.tls.any() ? " (mutual TLS)" : " (plain TCP)") << ": " << describe(job, *shared) << std::endl;
  };
  return run_coordinator_node(plan, job, *m, shared, cb, obs, listening, coordinator_end{conclude, if_stuck}, resume);
}

// The coordinator's role: its job, said and its model saved before the node's teardown
// (Note [A node's teardown] in net/node_system.cpp); the exit code. `if_stuck` finishes
// what run_node would after a teardown that hangs.
int run_coordinator(const node_plan& plan, node_cli& o, const observability& obs,
                    const std::function<int(int)>& if_stuck) {
  auto spec = resolve_job_options(o.job);
  if (!spec) {
    print_error(spec.error().message);
    return exit_usage;
  }
  job_spec job = std::move(*spec);
  job.job_id = plan.job_id;
  if (auto why = adopt_checkpointed_job(job, o.job.resume)) {
    print_error(*why);
    return exit_usage;
  }
  if (auto code = save_model_refused(job, o.save_model)) return *code;
  return job.kv ? run_kv_coordinator(plan, job, o, obs, if_stuck)
                : run_training_coordinator(plan, job, o, obs, if_stuck);
}

// Note [Nodes die with their launcher]: locally a launched node gets PR_SET_PDEATHSIG;
// over ssh nothing tells a remote process that the launcher is gone, except the ssh
// session's stdin, which launch holds open and never writes: when it ends, the node stops.
void stop_when_stdin_closes() {
  std::thread([] {
    char buf[256];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;
    }
    spdlog::error("stdin closed (--stop-when-stdin-closes): the launcher is gone; stopping this node");
    spdlog::default_logger()->flush();
    std::_Exit(exit_failed);
  }).detach();
}

// Warns of what the flags give up or what they set in vain: plain TCP off loopback, and
// the job's flags on a server or worker, whose job comes from the coordinator.
void warn_of_ignored_flags(const node_cli& o, const node_plan& plan) {
  if (!plan.tls.any() && o.node.insecure_network)
    spdlog::warn("--insecure-network: this node talks plain TCP and gives up what TLS gives: anyone who can watch "
                 "the network reads every parameter and gradient it sends, and anyone who can reach its port can "
                 "send its actors messages; the job's secret still guards joining, but a join seen on the wire can "
                 "be replayed. Use it only on an isolated, firewalled segment.");
  // Under --slurm every task gets the same command line, the job's flags included. How a
  // worker computes (--device, --tf32, --precision) is its own choice.
  if (plan.role == node_role::coordinator || o.node.slurm) return;
  for (const CLI::Option* opt : o.app->get_options()) {
    const std::string name = opt->get_single_name();
    const bool workers_own = name == "device" || name == "tf32" || name == "precision";
    if (opt->count() > 0 && opt->get_group() != group_node && opt->get_group() != group_observe && name != "data" &&
        name != "config" && !(workers_own && plan.role == node_role::worker))
      spdlog::warn("--{} is ignored on a {}: {}", name, name_of(plan.role),
                   workers_own ? "it sets how a worker computes" : "the job comes from the coordinator");
  }
}

int run_node(node_cli& o) {
  const environment env = current_environment();
  apply_environment(o.node, env);
  if (!o.role.empty()) o.node.role = *parse_node_role(o.role);
  if (o.node.slurm) {
    o.node.slurm_servers = o.job.job.servers;
    if (auto ok = apply_slurm(o.node, env); !ok) {
      print_error(ok.error().message);
      return exit_usage;
    }
  }
  if (o.node.stop_when_stdin_closes) stop_when_stdin_closes();
  auto plan = resolve_node_options(o.node);
  if (!plan) {
    print_error(plan.error().message);
    return exit_usage;
  }
  warn_of_ignored_flags(o, *plan);
  auto obs = start_observability(o.observe, plan->job_id, default_metrics_address(*plan));
  if (!obs) {
    print_error(obs.error().message);
    return exit_usage;
  }
  // The node's exit code, once its observability is finished.
  const auto finished = [&o, &obs, &plan](int code) {
    if (!finish_observability(*obs, o.observe, node_name(*plan), code == exit_ok) && code == exit_ok)
      return exit_failed;
    return code;
  };
  // A server's or worker's end, said, and its exit code. The same when CAF's teardown after
  // the role is stuck and the process leaves without it (Note [A node's teardown] in
  // net/node_system.cpp).
  const auto role_end = [&finished](const char* role) {
    return [&finished, role](const caf::error& err) {
      if (!err) return finished(exit_ok);
      print_error(std::string(role) + ": " + troupe::describe(err));
      return finished(exit_failed);
    };
  };
  switch (plan->role) {
    case node_role::coordinator: return finished(run_coordinator(*plan, o, *obs, finished));
    case node_role::server: {
      auto end = role_end("shard server");
      return end(run_server_node(*plan, *obs, end));
    }
    case node_role::worker: {
      set_blas_threads(1);
      const device dev = chosen_device(o.job.train);
      if (auto why = train_options_unfit(o.job.train)) {
        print_error(*why);
        return finished(exit_usage);
      }
      if (auto why = device_unusable(dev)) {
        print_error(*why);
        return finished(exit_failed);
      }
      if (const std::string how = describe_precision(o.job.train); !how.empty())
        spdlog::info("worker: {}", how.substr(2));
      const bool own_data = o.app->get_option("--data")->count() > 0;
      auto end = role_end("worker");
      return end(run_worker_node(*plan, own_data ? o.job.data.dir : std::string(), *obs,
                                 compute_options{dev, false, o.job.train.tf32, chosen_precision(o.job.train)}, end));
    }
  }
  return finished(exit_usage);
}

// --role to --job-id, and --slurm's: who this node is, where it listens and whom it joins.
void add_identity_options(CLI::App& a, const std::shared_ptr<node_cli>& o) {
  CLI::App* app = &a;
  app->add_option("--role", o->role, "coordinator, server or worker (or TROUPE_ROLE)")
      ->check(CLI::IsMember({"coordinator", "server", "worker"}))
      ->group(group_node);
  app->add_option("--listen", o->node.listen,
                  "HOST:PORT to listen on (coordinator default 127.0.0.1:7070, server 127.0.0.1:0; TROUPE_LISTEN)")
      ->group(group_node);
  app->add_option("--join", o->node.join, "HOST:PORT of the coordinator (servers, workers; TROUPE_COORDINATOR)")
      ->group(group_node);
  app->add_option("--advertise", o->node.advertise, "Host other nodes use to reach this one (default: the listen host; TROUPE_ADVERTISE)")
      ->group(group_node);
  app->add_option("--job-id", o->node.job_id, "Job identity every join must carry (default 'default'; TROUPE_JOB_ID)")
      ->group(group_node);
  app->add_flag("--slurm", o->node.slurm, "Take the role from SLURM_PROCID (0: coordinator, then --servers servers)")
      ->group(group_node);
  app->add_option("--port", o->node.slurm_port, "With --slurm: the coordinator's port (servers use the next ones)")
      ->capture_default_str()
      ->group(group_node);
}

// --tls-dir to --stop-when-stdin-closes: its credentials and the paths its tensors take.
void add_transport_options(CLI::App& a, const std::shared_ptr<node_cli>& o) {
  CLI::App* app = &a;
  app->add_option("--tls-dir", o->node.tls_dir, "Directory with node.pem (certificate and key) and ca.pem (TROUPE_TLS_DIR)")
      ->group(group_node);
  app->add_option("--tls-cert", o->node.tls.certificate, "PEM certificate chain (may also hold the key; TROUPE_TLS_CERT)")->group(group_node);
  app->add_option("--tls-key", o->node.tls.key, "PEM private key (may be the certificate file; TROUPE_TLS_KEY)")->group(group_node);
  app->add_option("--tls-ca", o->node.tls.ca, "The job's CA certificate: the only one trusted (TROUPE_TLS_CA)")->group(group_node);
  app->add_option("--tls-passphrase-file", o->node.tls_passphrase_file, "File holding the key's passphrase")
      ->group(group_node);
  app->add_option("--secret-file", o->node.secret_file,
                  "The job's secret (mode 0600; launch and tls init write job.secret); every join must prove it "
                  "(default: job.secret in --tls-dir; TROUPE_SECRET_FILE)")
      ->group(group_node);
  app->add_flag("--insecure-network", o->node.insecure_network,
                "Allow plain TCP off loopback (only on an isolated, firewalled segment; TROUPE_INSECURE_NETWORK=1)")
      ->group(group_node);
  app->add_flag("--no-shared-memory", [o](std::int64_t) { o->node.shared_memory = false; },
                "Send every tensor over the network, even to a shard on this host (default: shared memory on one "
                "host; TROUPE_SHARED_MEMORY=0)")
      ->group(group_node);
  app->add_flag("--no-doorbells", [o](std::int64_t) { o->node.doorbells = false; },
                "A worker sends its pushes and pulls to a shard on this host as actor messages through the network "
                "stack, not through the shared memory's doorbells (default: doorbells)")
      ->group(group_node);
  app->add_flag("--no-bulk-lanes", [o](std::int64_t) { o->node.bulk_lanes = false; },
                "Send large tensors to and from other hosts inside the actor messages instead of on lanes of their "
                "own (TROUPE_BULK_LANES=0)")
      ->group(group_node);
  app->add_option("--lane-port", o->node.lane_port_text,
                  "A shard server's port for bulk lanes, on its listen host, and an allreduce worker's for its ring lane "
                  "(default: any free one; TROUPE_LANE_PORT)")
      ->group(group_node);
  app->add_option("--worker-index", o->node.worker_index_text,
                  "The rank this worker asks for, granted while the job gathers its workers if it is free "
                  "(launch gives its k-th worker k; TROUPE_WORKER_INDEX; default: the lowest free one)")
      ->group(group_node);
  app->add_flag("--stop-when-stdin-closes", o->node.stop_when_stdin_closes,
                "Stop when stdin ends: launch over ssh holds it open, so a node stops when its launcher is gone, "
                "however the launcher ended")
      ->group(group_node);
}

// --heartbeat to --tls-handshake-timeout: how long it waits for its peers.
void add_timer_options(CLI::App& a, const std::shared_ptr<node_cli>& o) {
  CLI::App* app = &a;
  app->add_option("--heartbeat", o->node.heartbeat_s, "Seconds between heartbeats to peers")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str()
      ->group(group_node);
  app->add_option("--connection-timeout", o->node.connection_timeout_s, "Drop a peer silent for this many seconds")
      ->check(CLI::Range(0.05, 86400.0))
      ->capture_default_str()
      ->group(group_node);
  app->add_option("--connect-timeout", o->node.connect_timeout_s, "Give up reaching another node after this many seconds")
      ->check(CLI::Range(0.05, 86400.0))
      ->capture_default_str()
      ->group(group_node);
  app->add_option("--coordinator-timeout", o->node.coordinator_timeout_s,
                  "A server or worker whose coordinator is lost waits this many seconds for it to come back (on "
                  "the same address, restarted with --resume) and joins it again; 0: leave at once")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str()
      ->group(group_node);
  app->add_option("--tls-handshake-timeout", o->node.handshake_timeout_s,
                  "Close a TLS connection whose handshake has not finished after this many seconds")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str()
      ->group(group_node);
}

}  // namespace

command add_node(CLI::App& parent) {
  auto o = std::make_shared<node_cli>();
  CLI::App* app = parent.add_subcommand("node", "Run one node of a cluster job: a coordinator, a shard server or a worker");
  o->app = app;
  add_identity_options(*app, o);
  add_transport_options(*app, o);
  add_timer_options(*app, o);
  add_job_options(*app, o->job);
  add_observe_options(*app, o->observe);
  add_config_option(*app);
  add_save_model_option(*app, o->save_model);  // the coordinator's
  return {app, [o]() -> int { leave(run_node(*o)); }};
}

}  // namespace troupe::cli
