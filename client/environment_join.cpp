// environment_join: the TROUPE_* environment to a node plan, a node's actor system and a
// joined remote_transport (environment_join.hpp).
#include "client/environment_join.hpp"

#include <charconv>

#include "client/remote_transport.hpp"
#include "net/node.hpp"
#include "net/node_runtime.hpp"
#include "net/peer_expectations.hpp"

namespace troupe::kv {

or_fault<std::int32_t> worker_index(const std::map<std::string, std::string>& env) {
  auto it = env.find("TROUPE_WORKER_INDEX");
  if (it == env.end() || it->second.empty()) return -1;
  std::int32_t v = -1;
  const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || v < 0)
    return fault{errc::bad_job, "TROUPE_WORKER_INDEX is \"" + it->second +
                                    "\", not a worker index (0, 1, ...); `troupe launch` sets it, or unset it"};
  return v;
}

or_fault<std::unique_ptr<kv_transport>> join_from_environment(const std::map<std::string, std::string>& env,
                                                              const std::string& type) {
  node_options o;
  o.role = node_role::worker;
  apply_environment(o, env);
  if (o.join.empty())
    return fault{errc::bad_job,
                 "type " + type +
                     " joins the job that `troupe launch` started, but TROUPE_COORDINATOR "
                     "is not set; start this script with `troupe launch --local --workers N -- COMMAND`, "
                     "or use type \"local\""};
  if (o.job_id.empty())
    return fault{errc::bad_job, "TROUPE_JOB_ID is not set; `troupe launch` sets it with TROUPE_COORDINATOR"};
  auto plan = resolve_node_options(o);
  if (!plan) return fault{errc::bad_job, "the TROUPE_* environment is not usable: " + plan.error().message};
  const auto index = worker_index(env);
  if (const auto* bad = std::get_if<fault>(&index)) return *bad;
  raise_fd_limit();
  auto cfg = std::make_unique<caf::actor_system_config>();
  configure_node(*cfg, *plan);
  auto sys = std::make_unique<caf::actor_system>(*cfg);
  auto coordinator = reach_coordinator(*sys, *plan);
  if (!coordinator) return fault{errc::stalled, describe(coordinator.error())};
  member_options opts;
  opts.coordinator = *coordinator;
  opts.connector = connector_of(*sys, plan->tls.any());
  if (plan->tls.any())
    opts.expect_peer = [](const std::string& host, std::uint16_t port, const char* role) {
      expect_peer(host, port, role);
    };
  opts.connect_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(plan->connect_timeout_s * 1000));
  opts.wanted_rank = std::get<std::int32_t>(index);
  opts.doorbells = plan->doorbells;
  // Where ring neighbours reach this member (Note [A ring of users' loops] in
  // client/kv_member_ring.cpp): published in every job, since the mode comes with the welcome.
  opts.publish = [sys = sys.get(), at = plan->listen, host = plan->advertise,
                  tls = plan->tls.any()](const caf::actor& member) -> or_fault<std::pair<std::string, std::uint16_t>> {
    auto port = publish_on(*sys, caf::actor_cast<stage_actor>(member), at, tls);
    if (!port)
      return fault{errc::bad_job, "cannot listen on " + at.str() + " for this worker's ring neighbours: " +
                                      describe(port.error()) + "; set TROUPE_LISTEN to a free HOST:PORT"};
    return std::make_pair(host, *port);
  };
  auto lanes = member_lanes_for(*plan);
  if (!lanes) return fault{errc::bad_job, lanes.error().message};
  opts.lanes = *lanes;
  auto ring_lanes = ring_lanes_for(*plan);
  if (!ring_lanes) return fault{errc::bad_job, ring_lanes.error().message};
  opts.ring_lanes = std::move(*ring_lanes);
  const std::string proof = proof_for(*sys, *plan, "worker", *coordinator);
  const std::string tag = fast_path_tag(*plan);
  auto t = join_owning(std::move(cfg), std::move(sys), std::move(opts), tag, plan->job_id, proof);
  if (const auto* f = std::get_if<fault>(&t)) return *f;
  auto& joined = std::get<std::unique_ptr<kv_transport>>(t);
  const std::string want = type == "dist" ? std::string(name_of(joined->mode())) : type.substr(5);
  if (want != name_of(joined->mode()))
    return fault{errc::bad_job, "type " + type + " asked for " + want + " but the launched job runs " +
                                    std::string(name_of(joined->mode())) + "; pass --mode " + want +
                                    " to troupe launch"};
  return std::move(joined);
}

}  // namespace troupe::kv
