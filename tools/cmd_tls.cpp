// tls init: create the CA, the job's secret and one certificate+key file per named node;
// tls secret: create only a job's secret (for --insecure-network jobs started by hand).
#include "tools/cmd_tls.hpp"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "net/job_secret.hpp"
#include "transport/tls.hpp"

namespace troupe::cli {

namespace {

struct tls_cli {
  std::string dir;
  std::vector<std::string> nodes{"coordinator", "server", "worker"};
  std::vector<std::string> sans;
  double hours = 24;
  bool force = false;
  std::string secret_file;
};

int run_tls_secret(const tls_cli& o) {
  if (auto secret = create_job_secret(o.secret_file); !secret) {
    print_error(secret.error().message);
    return exit_failed;
  }
  std::cerr << "wrote " << o.secret_file << " (a job's secret, mode 0600; give it to every node of the job with "
            << "--secret-file, and to no one else)\n";
  return exit_ok;
}

int run_tls_init(const tls_cli& o) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(o.dir) / "ca.key") && !o.force) {
    print_error(o.dir + " already holds a CA; pass --force to replace it (every node then needs new certificates)");
    return exit_usage;
  }
  const auto valid = std::chrono::hours(static_cast<long>(o.hours));
  if (auto ok = create_ca(o.dir, "troupe job CA", valid); !ok) {
    print_error(ok.error().message);
    return exit_failed;
  }
  std::vector<std::string> sans = o.sans;
  if (sans.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    sans = {"DNS:localhost", "IP:127.0.0.1", std::string("DNS:") + host};
  }
  const fs::path secret_path = fs::path(o.dir) / "job.secret";
  std::error_code ec;
  fs::remove(secret_path, ec);  // (only reached for a new CA: the old secret goes with it)
  if (auto secret = create_job_secret(secret_path.string()); !secret) {
    print_error(secret.error().message);
    return exit_failed;
  }
  std::cerr << "wrote " << secret_path.string() << " (the job's secret; nodes started with --tls-dir " << o.dir
            << " prove it when they join)\n";
  for (const auto& n : o.nodes) {
    auto path = issue_node_certificate(o.dir, n, sans, std::chrono::seconds(-300), valid);
    if (!path) {
      print_error(path.error().message);
      return exit_failed;
    }
    const std::string role = role_for_certificate_name(n);
    std::cerr << "wrote " << *path << " (role " << role << ")\n";
    if (role == any_role)
      std::cerr << "warning: " << n << " does not start with coordinator, server or worker, so its certificate may act "
                << "as every role; a process holding it could pose as the coordinator or a shard\n";
  }
  std::cerr << "wrote " << (fs::path(o.dir) / "ca.pem").string() << " (the job's CA; keep ca.key private)\n"
            << "start each node with --tls-dir " << o.dir << " (a node uses ROLE.pem, else node.pem) or --tls-cert/"
            << "--tls-key DIR/NAME.pem --tls-ca DIR/ca.pem\n";
  return exit_ok;
}

}  // namespace

command add_tls(CLI::App& parent) {
  auto o = std::make_shared<tls_cli>();
  CLI::App* tls = parent.add_subcommand("tls", "Certificates for mutual TLS between the nodes of a job");
  CLI::App* init = tls->add_subcommand("init", "Create a private CA, the job's secret (job.secret) and node certificates in DIR (mode 0700, files 0600)");
  tls->require_subcommand(1);
  init->add_option("dir", o->dir, "Directory to create")->required();
  init->add_option("--node", o->nodes,
                   "Certificate names (each becomes NAME.pem, for the role its name starts with: coordinator, server "
                   "or worker; any other name may act as every role)")
      ->capture_default_str();
  init->add_option("--san", o->sans, "Subject alternative names, e.g. IP:10.0.0.5 or DNS:host (default: this host)");
  init->add_option("--hours", o->hours, "Validity in hours")->check(CLI::Range(1.0, 24.0 * 3650))->capture_default_str();
  init->add_flag("--force", o->force, "Replace an existing CA");
  CLI::App* secret = tls->add_subcommand("secret", "Create only a job's secret in FILE (mode 0600; refuses to replace one)");
  secret->add_option("file", o->secret_file, "File to create")->required();
  return {tls, [o, tls, secret] { return tls->got_subcommand(secret) ? run_tls_secret(*o) : run_tls_init(*o); }};
}

}  // namespace troupe::cli
