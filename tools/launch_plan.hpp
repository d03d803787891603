// What `troupe launch` runs: one `troupe node` per role, either as local processes or over
// ssh on the hosts of a host file (as MXNet's tools/launch.py did), plus the job directory
// they share: job.toml (the job's flags, for the coordinator), job.secret (every node
// proves it when joining) and, unless the network is declared trusted, a private CA and
// one certificate per node (mode 0600 in a 0700 dir).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "tools/process_group.hpp"

namespace troupe {

struct host_entry {
  std::string host;
  unsigned slots = 1;
};

// One host per line, optionally "slots=N"; blank lines and # comments are skipped.
expected<std::vector<host_entry>> parse_hostfile(const std::string& path);

struct launch_request {
  std::uint32_t servers = 2, workers = 2;
  std::string troupe_bin;                 // the troupe binary (on the remote hosts, for ssh)
  std::string job_id;
  std::string job_dir;                    // local directory for job.toml and the certificates
  std::string job_toml;                   // the coordinator's job flags
  bool write_files = true;                // false (a dry run): plan only, create nothing on disk
  bool tls = true;
  bool shared_memory = true;              // false: --no-shared-memory on every node and TROUPE_SHARED_MEMORY=0 for workers
  bool doorbells = true;      // false: --no-doorbells on every node and TROUPE_DOORBELLS=0 for workers
  bool bulk_lanes = true;                 // false: --no-bulk-lanes on every node and TROUPE_BULK_LANES=0 for workers
  std::uint16_t port = 7070;              // the coordinator's port (ssh: servers use the next ones)
  std::vector<std::string> node_flags;    // passed to every node (heartbeats, timeouts)
  // Flags for one node, by its certificate name ("coordinator", "server-0", "worker-1"):
  // the launcher uses it for --metrics and --trace.
  std::function<std::vector<std::string>(const std::string& node, const std::string& host)> per_node_flags;
  std::vector<host_entry> hosts;          // ssh only
  std::string remote_dir;                 // ssh only: where the job directory goes on each host
  std::string ssh = "ssh";                // ssh only
  // A key-value job: the workers are this command (a user's training script using the
  // client library), started with the TROUPE_* environment that joins it to the job.
  std::vector<std::string> worker_command;
};

// The host each launched worker runs on, by index: 127.0.0.1 for a local launch; with a
// host file, the hosts' slots in turn.
std::vector<std::string> worker_hosts(const launch_request& req);

// Where a worker sits among the job's workers, as Horovod names it: its rank among the
// workers on its host (local_rank) and how many they are (local_size); the index of its
// host among the hosts that have a worker of the same local rank, in the hosts' first
// order (cross_rank), and how many such hosts there are (cross_size).
struct worker_locality {
  std::uint32_t local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
};
worker_locality locality_of(const std::vector<std::string>& hosts, std::uint32_t index);

// The environment a user's worker command joins the job with: the coordinator, the job
// id, its certificate (or TROUPE_INSECURE_NETWORK) and the job's secret, all under `dir`
// (the job directory on the worker's host), its index among the launched workers, its
// locality (TROUPE_LOCAL_RANK, TROUPE_LOCAL_SIZE, TROUPE_CROSS_RANK, TROUPE_CROSS_SIZE),
// and TROUPE_SHARED_MEMORY=0, TROUPE_DOORBELLS=0 and TROUPE_BULK_LANES=0 when the request
// turns the same-host fast path, its doorbells or the bulk lanes off.
std::vector<std::pair<std::string, std::string>> worker_environment(const launch_request& req, const std::string& dir,
                                                                    const std::string& coordinator, std::uint32_t index);

struct launch_plan {
  std::vector<child_spec> setup;          // run first, one after the other (ssh: mkdir, scp)
  std::vector<child_spec> nodes;          // then all together; "coordinator" leads
  std::vector<child_spec> teardown;       // last, however the job ended (ssh: remove each host's job directory)
};

// Writes job.toml, job.secret and, with TLS, the CA and every node's certificate into
// req.job_dir.
expected<launch_plan> plan_local_launch(const launch_request& req);
expected<launch_plan> plan_ssh_launch(const launch_request& req);

// A command line as a shell would read it (for --dry-run and logs).
std::string shell_quote(const std::vector<std::string>& argv);

// A Prometheus scrape configuration for a job's nodes: one target per node, labelled
// with the node's name and the troupe_job.
struct scrape_target {
  std::string node;     // "coordinator", "server 0", ...
  std::string address;  // host:port of its /metrics
};
std::string prometheus_config(const std::string& job_id, const std::vector<scrape_target>& targets,
                              double scrape_interval_s = 5.0);

}  // namespace troupe
