// launch_node_flags: the flags `launch` gives each node of its own, on top of the job's:
// its metrics address (a reserved free loopback port locally, 9400 + n over ssh, each
// listed for Prometheus), its trace file (the node traces are merged at the end), the
// coordinator's --save-model, and a worker's device and precision. Local ports stay
// reserved until this object goes (see port_reservation.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/launch_plan.hpp"
#include "tools/port_reservation.hpp"

namespace troupe::cli {

struct node_flag_settings {
  bool local = true;             // --local; else ssh
  std::string metrics = "auto";  // --metrics: "off", or any other value for a port per node
  double metrics_linger_s = 15;
  bool trace = false;  // --trace: a trace file per node
  std::size_t trace_events = 200000;
  std::string save_model{};    // the coordinator's --save-model, when given
  std::string device = "cpu";  // --device: cpu, cuda (a host's k-th worker gets cuda:k) or cuda:N
  bool tf32 = false;
  std::string precision = "fp32";
};

class launch_node_flags {
 public:
  explicit launch_node_flags(node_flag_settings s) : s_(std::move(s)) {}

  // The flags of `node` ("coordinator", "server-0", "worker-1") on `host`, whose copy of
  // the job directory is `dir` (where its trace goes).
  std::vector<std::string> of(const std::string& node, const std::string& host, const std::string& dir);

  // A free loopback port, held until this object goes; 0 when none could be reserved
  // (reservation_error() then says why).
  std::uint16_t reserve();

  const std::vector<scrape_target>& targets() const { return targets_; }
  const std::vector<std::string>& traces() const { return traces_; }
  // Why the first port that could not be reserved was not; empty when every one was.
  const std::string& reservation_error() const { return reservation_error_; }

 private:
  node_flag_settings s_;
  std::vector<scrape_target> targets_;
  std::vector<std::string> traces_;
  std::vector<port_reservation> reserved_;
  std::string reservation_error_;
  std::uint16_t next_remote_metrics_ = 9400;
  std::map<std::string, int> workers_on_host_;
};

}  // namespace troupe::cli
