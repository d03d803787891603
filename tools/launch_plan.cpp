// launch_plan: host files, node command lines, the job directory.
#include "tools/launch_plan.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "net/job_secret.hpp"
#include "transport/tls.hpp"

namespace troupe {

namespace {

bool is_ip(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

std::string san_for(const std::string& host) { return (is_ip(host) ? "IP:" : "DNS:") + host; }

expected<bool> write_private(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return failure{"cannot write " + path};
  const bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ::close(fd);
  if (!ok) return failure{"cannot write " + path};
  return true;
}

// Creates the job directory, job.toml and (with TLS) the CA and the named certificates.
expected<bool> prepare_job_dir(const launch_request& req, const std::vector<std::pair<std::string, std::string>>& certs) {
  if (req.tls) {
    if (auto ok = create_ca(req.job_dir, "troupe job " + req.job_id, std::chrono::hours(24)); !ok) return ok.error();
    for (const auto& [name, host] : certs) {
      std::vector<std::string> sans{"DNS:localhost", "IP:127.0.0.1"};
      if (host != "localhost" && host != "127.0.0.1") sans.push_back(san_for(host));
      if (auto p = issue_node_certificate(req.job_dir, name, sans, std::chrono::seconds(-300), std::chrono::hours(24)); !p)
        return p.error();
    }
  } else {
    std::error_code ec;
    std::filesystem::create_directories(req.job_dir, ec);
    if (ec) return failure{"cannot create " + req.job_dir + ": " + ec.message()};
  }
  if (auto secret = create_job_secret((std::filesystem::path(req.job_dir) / "job.secret").string()); !secret)
    return secret.error();
  return write_private((std::filesystem::path(req.job_dir) / "job.toml").string(), req.job_toml);
}

std::vector<std::string> tls_flags(const launch_request& req, const std::string& dir, const std::string& name) {
  if (!req.tls) return {"--insecure-network"};
  const std::string pem = (std::filesystem::path(dir) / (name + ".pem")).string();
  return {"--tls-cert", pem, "--tls-key", pem, "--tls-ca", (std::filesystem::path(dir) / "ca.pem").string()};
}

std::vector<std::string> node_argv(const launch_request& req, const std::string& dir, const std::string& cert,
                                   std::vector<std::string> role_flags, const std::string& host = "127.0.0.1") {
  std::vector<std::string> argv{req.troupe_bin, "node"};
  argv.insert(argv.end(), role_flags.begin(), role_flags.end());
  argv.insert(argv.end(), {"--job-id", req.job_id});
  const auto tls = tls_flags(req, dir, cert);
  argv.insert(argv.end(), tls.begin(), tls.end());
  argv.insert(argv.end(), {"--secret-file", (std::filesystem::path(dir) / "job.secret").string()});
  argv.insert(argv.end(), req.node_flags.begin(), req.node_flags.end());
  if (req.per_node_flags) {
    const auto extra = req.per_node_flags(cert, host);
    argv.insert(argv.end(), extra.begin(), extra.end());
  }
  return argv;
}

}  // namespace

expected<std::vector<host_entry>> parse_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return failure{"--hostfile: cannot read " + path};
  std::vector<host_entry> hosts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    host_entry h;
    if (!(words >> h.host)) continue;
    for (std::string w; words >> w;) {
      if (w.rfind("slots=", 0) != 0 || w.size() == 6)
        return failure{path + ":" + std::to_string(n) + ": expected 'HOST [slots=N]', got '" + line + "'"};
      try {
        h.slots = static_cast<unsigned>(std::stoul(w.substr(6)));
      } catch (...) {
        h.slots = 0;
      }
      if (h.slots == 0) return failure{path + ":" + std::to_string(n) + ": slots must be a positive number"};
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) return failure{path + ": no hosts"};
  return hosts;
}

std::string shell_quote(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@%+") ==
                                         std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

std::string prometheus_config(const std::string& job_id, const std::vector<scrape_target>& targets,
                              double scrape_interval_s) {
  std::ostringstream y;
  y << "# Prometheus scrape configuration for Troupe job " << job_id << ".\n"
    << "# Add the alert rules with: rule_files: [/path/to/troupe/monitoring/prometheus/alerts.yml]\n"
    << "global:\n  scrape_interval: " << scrape_interval_s << "s\n  evaluation_interval: " << scrape_interval_s << "s\n"
    << "scrape_configs:\n  - job_name: troupe\n    static_configs:\n";
  for (const auto& t : targets)
    y << "      - targets: ['" << t.address << "']\n        labels: {node: '" << t.node << "'}\n";
  return y.str();
}

std::vector<std::string> worker_hosts(const launch_request& req) {
  if (req.hosts.empty()) return std::vector<std::string>(req.workers, "127.0.0.1");
  std::vector<std::string> slots;
  for (const auto& h : req.hosts)
    for (unsigned s = 0; s < h.slots; ++s) slots.push_back(h.host);
  std::vector<std::string> hosts;
  for (std::uint32_t i = 0; i < req.workers; ++i) hosts.push_back(slots[i % slots.size()]);
  return hosts;
}

worker_locality locality_of(const std::vector<std::string>& hosts, std::uint32_t index) {
  worker_locality w{.local_rank = 0, .local_size = 0, .cross_rank = 0, .cross_size = 0};
  const std::string& mine = hosts.at(index);
  std::map<std::string, std::uint32_t> seen;  // workers counted so far per host
  std::vector<std::string> order;             // hosts in their first order
  std::vector<std::uint32_t> local(hosts.size());
  for (std::uint32_t i = 0; i < hosts.size(); ++i) {
    if (!seen.contains(hosts[i])) order.push_back(hosts[i]);
    local[i] = seen[hosts[i]]++;
  }
  w.local_rank = local[index];
  w.local_size = seen[mine];
  for (const auto& h : order)
    if (seen[h] > w.local_rank) {  // that host has a worker of this local rank
      if (h == mine) w.cross_rank = w.cross_size;
      ++w.cross_size;
    }
  return w;
}

std::vector<std::pair<std::string, std::string>> worker_environment(const launch_request& req, const std::string& dir,
                                                                    const std::string& coordinator, std::uint32_t index) {
  const auto in = [&](const std::string& f) { return (std::filesystem::path(dir) / f).string(); };
  std::vector<std::pair<std::string, std::string>> env{
      {"TROUPE_COORDINATOR", coordinator},
      {"TROUPE_JOB_ID", req.job_id},
      {"TROUPE_SECRET_FILE", in("job.secret")},
      {"TROUPE_WORKER_INDEX", std::to_string(index)},
      {"TROUPE_WORKERS", std::to_string(req.workers)}};
  const worker_locality w = locality_of(worker_hosts(req), index);
  env.insert(env.end(), {{"TROUPE_LOCAL_RANK", std::to_string(w.local_rank)},
                         {"TROUPE_LOCAL_SIZE", std::to_string(w.local_size)},
                         {"TROUPE_CROSS_RANK", std::to_string(w.cross_rank)},
                         {"TROUPE_CROSS_SIZE", std::to_string(w.cross_size)}});
  if (req.tls) {
    const std::string cert = in("worker-" + std::to_string(index) + ".pem");
    env.insert(env.end(), {{"TROUPE_TLS_CERT", cert}, {"TROUPE_TLS_KEY", cert}, {"TROUPE_TLS_CA", in("ca.pem")}});
  } else {
    env.emplace_back("TROUPE_INSECURE_NETWORK", "1");
  }
  if (!req.shared_memory) env.emplace_back("TROUPE_SHARED_MEMORY", "0");
  if (!req.doorbells) env.emplace_back("TROUPE_DOORBELLS", "0");
  if (!req.bulk_lanes) env.emplace_back("TROUPE_BULK_LANES", "0");
  return env;
}

expected<launch_plan> plan_local_launch(const launch_request& req) {
  std::vector<std::pair<std::string, std::string>> certs{{"coordinator", "127.0.0.1"}};
  for (std::uint32_t i = 0; i < req.servers; ++i) certs.emplace_back("server-" + std::to_string(i), "127.0.0.1");
  for (std::uint32_t i = 0; i < req.workers; ++i) certs.emplace_back("worker-" + std::to_string(i), "127.0.0.1");
  if (req.write_files) {
    if (auto ok = prepare_job_dir(req, certs); !ok) return ok.error();
  }
  const std::string coord = "127.0.0.1:" + std::to_string(req.port);
  const std::string toml = (std::filesystem::path(req.job_dir) / "job.toml").string();
  launch_plan plan;
  plan.nodes.push_back({"coordinator",
                        node_argv(req, req.job_dir, "coordinator", {"--role", "coordinator", "--listen", coord, "--config", toml}),
                        true, {}});
  for (std::uint32_t i = 0; i < req.servers; ++i)
    plan.nodes.push_back({"server " + std::to_string(i),
                          node_argv(req, req.job_dir, "server-" + std::to_string(i),
                                    {"--role", "server", "--listen", "127.0.0.1:0", "--join", coord}),
                          false, {}});
  for (std::uint32_t i = 0; i < req.workers; ++i) {
    if (!req.worker_command.empty()) {
      plan.nodes.push_back({"worker " + std::to_string(i), req.worker_command, false,
                            worker_environment(req, req.job_dir, coord, i)});
      continue;
    }
    plan.nodes.push_back({"worker " + std::to_string(i),
                          node_argv(req, req.job_dir, "worker-" + std::to_string(i),
                                    {"--role", "worker", "--join", coord, "--worker-index", std::to_string(i)}),
                          false, {}});
  }
  return plan;
}

namespace {

// One process of an ssh launch: its name, certificate, host and role flags.
struct placed_node {
  std::string name, cert, host;
  std::vector<std::string> role_flags;
};

// The coordinator on the first host, server i on host i mod hosts, worker i in slot i mod
// slots (each host's slots in order).
std::vector<placed_node> place_nodes(const launch_request& req, const std::string& coord) {
  const std::vector<std::string> on = worker_hosts(req);
  std::vector<placed_node> nodes;
  nodes.push_back({"coordinator", "coordinator", req.hosts.front().host,
                   {"--role", "coordinator", "--listen", "0.0.0.0:" + std::to_string(req.port), "--config",
                    req.remote_dir + "/job.toml"}});
  for (std::uint32_t i = 0; i < req.servers; ++i) {
    const std::string host = req.hosts[i % req.hosts.size()].host;
    nodes.push_back({"server " + std::to_string(i), "server-" + std::to_string(i), host,
                     {"--role", "server", "--listen", "0.0.0.0:" + std::to_string(req.port + 1 + i), "--advertise", host,
                      "--join", coord}});
  }
  for (std::uint32_t i = 0; i < req.workers; ++i) {
    const std::string& host = on[i];
    nodes.push_back({"worker " + std::to_string(i), "worker-" + std::to_string(i), host,
                     {"--role", "worker", "--listen", "0.0.0.0:0", "--advertise", host, "--join", coord,
                      "--worker-index", std::to_string(i)}});
  }
  return nodes;
}

// The steps that give `host` the job directory once (job.toml, the secret, the CA
// certificate and its nodes' files) and remove it at the end.
void copy_job_dir_to(const std::string& host, const launch_request& req, const std::vector<placed_node>& nodes,
                     const std::vector<std::string>& ssh_opts, launch_plan& plan) {
  auto mk = ssh_opts;
  mk.insert(mk.end(), {host, "mkdir -p -m 700 " + shell_quote({req.remote_dir})});
  plan.setup.push_back({"setup " + host, mk, false, {}});
  std::vector<std::string> files{(std::filesystem::path(req.job_dir) / "job.toml").string(),
                                 (std::filesystem::path(req.job_dir) / "job.secret").string()};
  if (req.tls) {
    files.push_back((std::filesystem::path(req.job_dir) / "ca.pem").string());
    for (const auto& m : nodes)
      if (m.host == host) files.push_back((std::filesystem::path(req.job_dir) / (m.cert + ".pem")).string());
  }
  std::vector<std::string> scp{"scp", "-q", "-p", "-o", "BatchMode=yes"};
  scp.insert(scp.end(), files.begin(), files.end());
  scp.push_back(host + ":" + req.remote_dir + "/");
  plan.setup.push_back({"setup " + host, scp, false, {}});
  auto rm = ssh_opts;
  rm.insert(rm.end(), {host, "rm -rf " + shell_quote({req.remote_dir})});
  plan.teardown.push_back({"cleanup " + host, rm, false, {}});
}

}  // namespace

expected<launch_plan> plan_ssh_launch(const launch_request& req) {
  if (req.hosts.empty()) return failure{"--hostfile names no hosts"};
  const std::string coord = req.hosts.front().host + ":" + std::to_string(req.port);
  const std::vector<placed_node> nodes = place_nodes(req, coord);
  std::vector<std::pair<std::string, std::string>> certs;
  for (const auto& n : nodes) certs.emplace_back(n.cert, n.host);
  if (req.write_files) {
    if (auto ok = prepare_job_dir(req, certs); !ok) return ok.error();
  }
  launch_plan plan;
  // A host that goes away ends its nodes' sessions with 255 within about 9 s (3 unanswered
  // keep-alives 3 s apart), inside the grace launch gives nodes after their job ends, so
  // launch can tell a lost host from a node that failed (Note [Leaving out lost workers]
  // in tools/launch_restarts.hpp). Without them a dead host's session waits on TCP.
  const std::vector<std::string> ssh_opts{req.ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                          "-o", "ServerAliveInterval=3", "-o", "ServerAliveCountMax=3"};
  std::vector<std::string> hosts_done;
  for (const auto& n : nodes) {
    // Each host gets the job directory once: job.toml, the CA certificate and its nodes' files.
    if (std::find(hosts_done.begin(), hosts_done.end(), n.host) == hosts_done.end()) {
      hosts_done.push_back(n.host);
      copy_job_dir_to(n.host, req, nodes, ssh_opts, plan);
    }
    auto cmd = ssh_opts;
    cmd.push_back(n.host);
    if (!req.worker_command.empty() && n.cert.rfind("worker-", 0) == 0) {
      std::vector<std::string> with_env{"env"};
      for (const auto& [k, v] : worker_environment(req, req.remote_dir, coord, std::stoul(n.cert.substr(7))))
        with_env.push_back(k + "=" + v);
      with_env.insert(with_env.end(), req.worker_command.begin(), req.worker_command.end());
      cmd.push_back(shell_quote(with_env));
    } else {
      // Note [Nodes die with their launcher] in tools/cmd_node.cpp: the session's stdin.
      auto flags = n.role_flags;
      flags.push_back("--stop-when-stdin-closes");
      cmd.push_back(shell_quote(node_argv(req, req.remote_dir, n.cert, flags, n.host)));
    }
    plan.nodes.push_back({n.name + " @" + n.host, cmd, n.name == "coordinator", {}, true});
  }
  plan.nodes.front().name = "coordinator";
  return plan;
}

}  // namespace troupe
