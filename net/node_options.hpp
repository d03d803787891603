// What one `troupe node` process is: its role, where it listens and whom it joins, its
// job id, its TLS files and timeouts. Flags fill it; TROUPE_* environment variables fill
// what the flags left unset (for Kubernetes and other launchers, as DMLC_* did for MXNet);
// under Slurm the role comes from SLURM_PROCID. check_node_options() enforces the
// security posture: a node that listens off loopback needs TLS or --insecure-network.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "net/endpoint.hpp"
#include "transport/tls.hpp"

namespace troupe {

enum class node_role : std::uint8_t { coordinator, server, worker };
expected<node_role> parse_node_role(std::string_view name);
std::string_view name_of(node_role r);

struct node_options {
  std::optional<node_role> role;
  std::string listen;             // HOST:PORT; default 127.0.0.1:7070 (coordinator), 127.0.0.1:0 (others)
  std::string join;               // HOST:PORT of the coordinator (servers and workers)
  std::string advertise;          // host other nodes use to reach this one (default: the listen host)
  std::string job_id;             // empty: "default"
  std::string tls_dir;            // DIR/node.pem + DIR/ca.pem
  tls_files tls;                  // or the files one by one
  std::string tls_passphrase_file;
  std::string secret_file;        // the job's secret (net/job_secret.hpp); default DIR/job.secret with --tls-dir
  bool insecure_network = false;
  bool shared_memory = true;      // the same-host fast path (Note [Same-host fast path])
  bool doorbells = true;          // its pushes' and pulls' messages through shared memory too (Note [Doorbells])
  bool bulk_lanes = true;         // large tensors over the network on lanes of their own (Note [Bulk lanes])
  std::string lane_port_text;     // a shard's lane listener port (empty or 0: any free port)
  std::string worker_index_text;  // the rank a worker asks for (empty: any)
  bool stop_when_stdin_closes = false;  // launch over ssh: the launcher is gone when stdin ends
  double heartbeat_s = 0.5;       // BASP heartbeats; a silent peer is dropped after connection_timeout_s
  double connection_timeout_s = 5.0;
  double connect_timeout_s = 30.0;  // each attempt to reach another node
  double handshake_timeout_s = 10.0;  // a TLS handshake must finish within this
  // A server's or worker's wait for a lost coordinator to come back (Note [Joining
  // again] in net/node.cpp); 0: the node leaves at once.
  double coordinator_timeout_s = 0.0;
  bool slurm = false;
  std::uint32_t slurm_servers = 1;  // with --slurm: tasks 1..S are shard servers
  std::uint16_t slurm_port = 7070;
};

using environment = std::map<std::string, std::string>;
environment current_environment();

// Fills unset fields from TROUPE_ROLE, TROUPE_COORDINATOR, TROUPE_LISTEN,
// TROUPE_ADVERTISE, TROUPE_JOB_ID, TROUPE_TLS_DIR (or TROUPE_TLS_CERT, TROUPE_TLS_KEY and
// TROUPE_TLS_CA), TROUPE_SECRET_FILE, TROUPE_INSECURE_NETWORK, TROUPE_SHARED_MEMORY,
// TROUPE_DOORBELLS and TROUPE_BULK_LANES (0 or false: off), TROUPE_LANE_PORT and
// TROUPE_WORKER_INDEX.
void apply_environment(node_options& o, const environment& env);

// With o.slurm: role, listen and join from SLURM_PROCID and SLURM_NODELIST (task 0 is the
// coordinator on the first host, the next slurm_servers tasks are shard servers, and the
// rest workers, asking for ranks in task order).
expected<bool> apply_slurm(node_options& o, const environment& env);
// Expands a Slurm host list such as "gpu[01-03,07],cpu5" into host names.
expected<std::vector<std::string>> expand_slurm_nodelist(std::string_view list);

// The resolved form the node runs with.
struct node_plan {
  node_role role = node_role::worker;
  endpoint listen;
  std::optional<endpoint> join;
  std::string advertise;
  std::string job_id = "default";
  tls_files tls;                 // empty: plain transport
  std::string secret;            // the job's secret (64 hex digits); a resolved plan always has one
  bool shared_memory = true;     // shards and workers on one host exchange tensors in shared memory
  bool doorbells = true;         // and a worker's pushes and pulls with them (Note [Doorbells] in transport/doorbell.hpp)
  bool bulk_lanes = true;        // shards and members on different hosts: large tensors on lanes (Note [Bulk lanes])
  std::uint16_t lane_port = 0;   // a shard's lane listener (0: any free port)
  std::int32_t wanted_rank = -1; // a worker's: the rank it asks for (worker_join::wanted_rank), -1: any
  double heartbeat_s = 0.5, connection_timeout_s = 5.0, connect_timeout_s = 30.0;
  double handshake_timeout_s = 10.0;
  double coordinator_timeout_s = 0.0;  // node_options::coordinator_timeout_s
};

// Checks and resolves the options: the role is known, the addresses parse, servers and
// workers know the coordinator, TLS files pass the preflight, and a node listening off
// loopback has TLS or --insecure-network. Returns the plan or what is wrong and what to do.
expected<node_plan> resolve_node_options(const node_options& o);

}  // namespace troupe
