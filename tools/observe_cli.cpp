// observe_cli: flags, the exposer's address, the trace file.
#include "tools/observe_cli.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "net/endpoint.hpp"

namespace troupe::cli {

void add_observe_options(CLI::App& app, observe_options& o) {
  o.metrics_flag = app.add_option("--metrics", o.metrics,
                                  "Serve Prometheus metrics on HOST:PORT, or 'off' (default: 127.0.0.1 and a port "
                                  "derived from the node's)")
                       ->capture_default_str()
                       ->group(group_observe);
  app.add_option("--metrics-linger", o.metrics_linger_s,
                 "Seconds to keep serving metrics after the job ends, until a scrape has read the final values; "
                 "only when something has scraped this process (0: none)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str()
      ->group(group_observe);
  app.add_option("--trace", o.trace, "Write a Chrome trace-event timeline (Perfetto) to this file")->group(group_observe);
  app.add_option("--trace-events", o.trace_events, "Most recent events the trace keeps")
      ->check(CLI::Range(16, 100000000))
      ->capture_default_str()
      ->group(group_observe);
}

std::optional<std::string> trace_unwritable(const std::string& path) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return "--trace: cannot write " + path + ": " + std::strerror(errno) + "; give a file in a writable directory";
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return std::nullopt;
}

expected<observability> start_observability(const observe_options& o, const std::string& job_id,
                                            const std::string& fallback) {
  if (!o.trace.empty())
    if (auto why = trace_unwritable(o.trace)) return failure{*why};
  observability obs;
  if (!o.trace.empty()) obs.trace = std::make_shared<monitoring::trace_log>(o.trace_events);
  if (o.metrics == "off") return obs;
  const bool automatic = o.metrics == "auto";
  auto at = parse_endpoint(automatic ? fallback : o.metrics, "--metrics");
  if (!at) return at.error();
  obs.metrics = std::make_shared<monitoring::registry>(job_id);
  auto port = obs.metrics->serve(at->host, at->port);
  if (!port && automatic && at->port != 0) port = obs.metrics->serve(at->host, 0);  // the default was busy
  if (!port) return port.error();
  std::cerr << "metrics on http://" << endpoint{at->host, *port}.str() << "/metrics" << std::endl;
  return obs;
}

namespace {

bool write_trace(const observability& obs, const observe_options& o, const std::string& process_name) {
  if (!obs.trace) return true;
  if (auto ok = obs.trace->write(o.trace, process_name, static_cast<std::uint32_t>(::getpid())); !ok) {
    print_error(ok.error().message);
    return false;
  }
  std::cerr << "trace: " << obs.trace->recorded() << " events in " << o.trace;
  if (obs.trace->dropped()) std::cerr << " (" << obs.trace->dropped() << " older ones dropped; raise --trace-events)";
  std::cerr << std::endl;
  return true;
}

}  // namespace

bool finish_observability(const observability& obs, const observe_options& o, const std::string& process_name,
                          bool succeeded) {
  const bool traced = write_trace(obs, o, process_name);
  if (obs.metrics) {
    obs.metrics->set_job_state(succeeded && traced ? monitoring::job_state::finished : monitoring::job_state::failed);
    obs.metrics->linger(std::chrono::milliseconds(static_cast<std::int64_t>(o.metrics_linger_s * 1000)));
  }
  return traced;
}

}  // namespace troupe::cli
