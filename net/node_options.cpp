// Node options: roles, environment, Slurm, and the checks before a node starts.
#include "net/node_options.hpp"

#include <charconv>
#include <filesystem>
#include <fstream>

#include "base/enum_names.hpp"
#include "net/job_secret.hpp"

extern char** environ;

namespace troupe {

// node_role's names, for its parse and name_of.
constexpr std::array<enum_name<node_role>, 3> node_roles{{
    {node_role::coordinator, "coordinator"},
    {node_role::server, "server"},
    {node_role::worker, "worker"},
}};

expected<node_role> parse_node_role(std::string_view name) { return parse_in(node_roles, name, "role"); }

std::string_view name_of(node_role x) { return name_in(node_roles, x); }

environment current_environment() {
  environment env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

void apply_environment(node_options& o, const environment& env) {
  auto get = [&](const char* k) -> std::string {
    auto it = env.find(k);
    return it == env.end() ? std::string() : it->second;
  };
  if (!o.role) {
    if (auto r = parse_node_role(get("TROUPE_ROLE")); r) o.role = *r;
  }
  if (o.join.empty()) o.join = get("TROUPE_COORDINATOR");
  if (o.listen.empty()) o.listen = get("TROUPE_LISTEN");
  if (o.advertise.empty()) o.advertise = get("TROUPE_ADVERTISE");
  if (o.job_id.empty()) o.job_id = get("TROUPE_JOB_ID");
  if (o.tls_dir.empty()) o.tls_dir = get("TROUPE_TLS_DIR");
  if (o.secret_file.empty()) o.secret_file = get("TROUPE_SECRET_FILE");
  if (!o.tls.any() && o.tls_dir.empty()) {
    o.tls.certificate = get("TROUPE_TLS_CERT");
    o.tls.key = get("TROUPE_TLS_KEY");
    o.tls.ca = get("TROUPE_TLS_CA");
  }
  const std::string insecure = get("TROUPE_INSECURE_NETWORK");
  if (insecure == "1" || insecure == "true") o.insecure_network = true;
  const std::string shm = get("TROUPE_SHARED_MEMORY");
  if (shm == "0" || shm == "false") o.shared_memory = false;
  const std::string bells = get("TROUPE_DOORBELLS");
  if (bells == "0" || bells == "false") o.doorbells = false;
  const std::string lanes = get("TROUPE_BULK_LANES");
  if (lanes == "0" || lanes == "false") o.bulk_lanes = false;
  if (o.lane_port_text.empty()) o.lane_port_text = get("TROUPE_LANE_PORT");
  if (o.worker_index_text.empty()) o.worker_index_text = get("TROUPE_WORKER_INDEX");
}

expected<std::vector<std::string>> expand_slurm_nodelist(std::string_view list) {
  std::vector<std::string> hosts;
  auto bad = [&] { return failure{"cannot read the Slurm node list '" + std::string(list) + "'"}; };
  std::size_t i = 0;
  while (i < list.size()) {
    const std::size_t start = i;
    while (i < list.size() && list[i] != ',' && list[i] != '[') ++i;
    const std::string prefix(list.substr(start, i - start));
    if (i < list.size() && list[i] == '[') {
      const std::size_t close = list.find(']', i);
      if (close == std::string_view::npos) return bad();
      std::string_view ranges = list.substr(i + 1, close - i - 1);
      while (!ranges.empty()) {
        const auto comma = ranges.find(',');
        const std::string_view r = ranges.substr(0, comma);
        const auto dash = r.find('-');
        const std::string_view lo_s = r.substr(0, dash), hi_s = dash == std::string_view::npos ? lo_s : r.substr(dash + 1);
        unsigned lo = 0, hi = 0;
        if (std::from_chars(lo_s.data(), lo_s.data() + lo_s.size(), lo).ec != std::errc() ||
            std::from_chars(hi_s.data(), hi_s.data() + hi_s.size(), hi).ec != std::errc() || hi < lo || hi - lo > 100000)
          return bad();
        for (unsigned n = lo; n <= hi; ++n) {
          std::string num = std::to_string(n);
          if (num.size() < lo_s.size()) num.insert(0, lo_s.size() - num.size(), '0');  // keep zero padding
          hosts.push_back(prefix + num);
        }
        if (comma == std::string_view::npos) break;
        ranges.remove_prefix(comma + 1);
      }
      i = close + 1;
    } else if (!prefix.empty()) {
      hosts.push_back(prefix);
    }
    if (i < list.size() && list[i] == ',') ++i;
  }
  if (hosts.empty()) return bad();
  return hosts;
}

expected<bool> apply_slurm(node_options& o, const environment& env) {
  auto get = [&](const char* k) { auto it = env.find(k); return it == env.end() ? std::string() : it->second; };
  const std::string procid = get("SLURM_PROCID"), ntasks = get("SLURM_NTASKS"), nodelist = get("SLURM_NODELIST");
  if (procid.empty() || ntasks.empty() || nodelist.empty())
    return failure{"--slurm: SLURM_PROCID, SLURM_NTASKS and SLURM_NODELIST must be set; start the nodes with srun"};
  unsigned id = 0, n = 0;
  std::from_chars(procid.data(), procid.data() + procid.size(), id);
  std::from_chars(ntasks.data(), ntasks.data() + ntasks.size(), n);
  if (n < o.slurm_servers + 2)
    return failure{"--slurm: " + ntasks + " tasks cannot hold a coordinator, " + std::to_string(o.slurm_servers) +
                   " servers and at least one worker"};
  auto hosts = expand_slurm_nodelist(nodelist);
  if (!hosts) return hosts.error();
  o.role = id == 0 ? node_role::coordinator : id <= o.slurm_servers ? node_role::server : node_role::worker;
  o.join = (*hosts)[0] + ":" + std::to_string(o.slurm_port);
  if (o.role == node_role::coordinator) o.listen = "0.0.0.0:" + std::to_string(o.slurm_port);
  if (o.role == node_role::server) o.listen = "0.0.0.0:" + std::to_string(o.slurm_port + id);
  if (o.role == node_role::worker && o.worker_index_text.empty())
    o.worker_index_text = std::to_string(id - 1 - o.slurm_servers);
  if (o.advertise.empty()) o.advertise = get("SLURMD_NODENAME");
  if (o.job_id.empty()) o.job_id = "slurm-" + get("SLURM_JOB_ID");
  return true;
}

namespace {

// --lane-port and --worker-index, given as text (they may come from the environment).
std::optional<failure> take_numbers(const node_options& o, node_plan& p) {
  if (!o.lane_port_text.empty()) {
    unsigned v = 0;
    const auto& t = o.lane_port_text;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size() || v > 65535)
      return failure{"the lane port (--lane-port or TROUPE_LANE_PORT) is '" + t + "', not a port number 0-65535"};
    p.lane_port = static_cast<std::uint16_t>(v);
  }
  if (!o.worker_index_text.empty()) {
    unsigned v = 0;
    const auto& t = o.worker_index_text;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size() || v > 1000000)
      return failure{"the worker index (--worker-index or TROUPE_WORKER_INDEX) is '" + t +
                     "', not a rank (0, 1, 2, ...)"};
    p.wanted_rank = static_cast<std::int32_t>(v);
  }
  return std::nullopt;
}

// The node's credentials: its TLS files and passphrase and the job's secret, and the
// refusal of a node without TLS (unless --insecure-network) or without a secret.
std::optional<failure> take_credentials(const node_options& o, node_plan& p) {
  // TLS files: --tls-dir, or each file.
  p.tls = o.tls;
  if (!o.tls_dir.empty() && !o.tls.any()) p.tls = tls_files_in(o.tls_dir, std::string(name_of(p.role)));
  if (!o.tls_passphrase_file.empty()) {
    std::ifstream f(o.tls_passphrase_file);
    if (!f) return failure{"--tls-passphrase-file: cannot read " + o.tls_passphrase_file};
    std::getline(f, p.tls.passphrase);
  }
  std::string secret_file = o.secret_file;
  if (secret_file.empty() && !o.tls_dir.empty() && std::filesystem::exists(std::filesystem::path(o.tls_dir) / "job.secret"))
    secret_file = (std::filesystem::path(o.tls_dir) / "job.secret").string();
  if (!secret_file.empty()) {
    auto secret = load_job_secret(secret_file);
    if (!secret) return secret.error();
    p.secret = std::move(*secret);
  }
  if (p.tls.any()) {
    if (auto problem = tls_preflight(p.tls)) return failure{"TLS preflight failed: " + *problem};
  } else if (!o.insecure_network) {
    return failure{"this node has no TLS certificate. Every node speaks mutual TLS, on loopback too: CAF's plain "
                   "transport authenticates nobody, so any process that can reach " + p.listen.str() +
                   (p.join ? " or " + p.join->str() : std::string()) +
                   " (any user of this host, on 127.0.0.1) could read the job's parameters and send its actors "
                   "messages. Give it the job's certificates (--tls-dir DIR, or --tls-cert/--tls-key/--tls-ca; "
                   "`troupe tls init DIR` makes them and `troupe launch` does it for you), or pass "
                   "--insecure-network on an isolated, firewalled segment"};
  }
  if (p.secret.empty())
    return failure{"this node has no job secret: every node proves it holds the job's secret when it joins, and a "
                   "coordinator admits no one without it. Pass --secret-file FILE (or set TROUPE_SECRET_FILE; with "
                   "--tls-dir DIR, DIR/job.secret is used); `troupe tls init DIR` and `troupe tls secret FILE` write "
                   "one, and `troupe launch` does it for you"};
  return std::nullopt;
}

}  // namespace

expected<node_plan> resolve_node_options(const node_options& o) {
  node_plan p;
  if (!o.role) return failure{"--role is required: coordinator, server or worker (or set TROUPE_ROLE, or use --slurm)"};
  p.role = *o.role;
  if (!o.job_id.empty()) p.job_id = o.job_id;
  p.heartbeat_s = o.heartbeat_s;
  p.connection_timeout_s = o.connection_timeout_s;
  p.connect_timeout_s = o.connect_timeout_s;
  p.handshake_timeout_s = o.handshake_timeout_s;
  p.coordinator_timeout_s = o.coordinator_timeout_s;
  p.shared_memory = o.shared_memory;
  p.doorbells = o.doorbells;
  p.bulk_lanes = o.bulk_lanes;
  if (auto bad = take_numbers(o, p)) return *bad;
  const std::string default_listen = p.role == node_role::coordinator ? "127.0.0.1:7070" : "127.0.0.1:0";
  auto listen = parse_endpoint(o.listen.empty() ? default_listen : o.listen, "--listen");
  if (!listen) return listen.error();
  p.listen = *listen;
  if (p.role != node_role::coordinator) {
    if (o.join.empty())
      return failure{"--join HOST:PORT (the coordinator) is required for a " + std::string(name_of(p.role)) +
                     " (or set TROUPE_COORDINATOR)"};
    auto join = parse_endpoint(o.join, "--join");
    if (!join) return join.error();
    p.join = *join;
  }
  const bool wildcard = p.listen.host == "0.0.0.0" || p.listen.host == "::";
  p.advertise = !o.advertise.empty() ? o.advertise : p.listen.host;
  if (wildcard && o.advertise.empty() && p.role != node_role::coordinator)
    return failure{"--listen " + p.listen.str() + " binds every interface; say which address other nodes should use "
                   "to reach this " + std::string(name_of(p.role)) + " with --advertise HOST"};
  if (auto bad = take_credentials(o, p)) return *bad;
  return p;
}

}  // namespace troupe
