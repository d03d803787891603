// launch_node_flags: metrics addresses, trace files, the coordinator's model file and the
// workers' devices, node by node.
#include "tools/launch_node_flags.hpp"

#include "tools/cli_common.hpp"

namespace troupe::cli {

std::uint16_t launch_node_flags::reserve() {
  auto r = port_reservation::on_loopback();
  if (!r) {
    if (reservation_error_.empty()) reservation_error_ = r.error().message;
    return 0;
  }
  reserved_.push_back(std::move(*r));
  return reserved_.back().port();
}

std::vector<std::string> launch_node_flags::of(const std::string& node, const std::string& host,
                                               const std::string& dir) {
  std::vector<std::string> flags;
  if (s_.metrics == "off") {
    flags = {"--metrics", "off"};
  } else {
    const std::string at =
        s_.local ? "127.0.0.1:" + std::to_string(reserve()) : "0.0.0.0:" + std::to_string(next_remote_metrics_);
    flags = {"--metrics", at, "--metrics-linger", flag_value(s_.metrics_linger_s)};
    targets_.push_back({node, s_.local ? at : host + ":" + std::to_string(next_remote_metrics_)});
    ++next_remote_metrics_;
  }
  if (s_.trace) {
    const std::string file = dir + "/trace-" + node + ".json";
    flags.insert(flags.end(), {"--trace", file, "--trace-events", std::to_string(s_.trace_events)});
    traces_.push_back(file);
  }
  if (node == "coordinator" && !s_.save_model.empty()) flags.insert(flags.end(), {"--save-model", s_.save_model});
  const bool worker = node.rfind("worker-", 0) == 0;
  // The device is each worker node's own choice; the coordinator and shards ignore it.
  // `--device cuda` spreads a host's workers over its GPUs: the k-th worker on a host
  // gets cuda:k (one that asks for a GPU the host lacks fails with that message).
  if (worker && s_.device != "cpu") {
    flags.insert(flags.end(),
                 {"--device", s_.device == "cuda" ? "cuda:" + std::to_string(workers_on_host_[host]++) : s_.device});
    if (s_.tf32) flags.push_back("--tf32");
  }
  if (worker && s_.precision != "fp32") flags.insert(flags.end(), {"--precision", s_.precision});
  return flags;
}

}  // namespace troupe::cli
