// node: publish/connect, spawn the role's actor, wait for it, and join again when the
// job restarts or its coordinator comes back (Note [Joining again]).
#include "net/node.hpp"

#include <spdlog/spdlog.h>

#include <mutex>
#include <optional>
#include <thread>

#include "actors/pipeline_stage.hpp"
#include "actors/runtime.hpp"
#include "actors/shard_server.hpp"
#include "net/job_secret.hpp"
#include "net/node_runtime.hpp"
#include "net/node_system.hpp"
#include "net/peer_certificates.hpp"
#include "net/peer_expectations.hpp"
#include "transport/lane_transport.hpp"
#include "transport/shm_segment.hpp"
#include "transport/tls.hpp"

namespace troupe {

namespace {

std::chrono::milliseconds ms(double s) { return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000)); }

// The coordinator's check of each join: its proof of the job's secret and, with TLS, the
// certificate its node connected with (Note [Certificate roles]). An admitted node's
// certificate is logged.
join_gate gate_for(caf::actor_system& sys, const node_plan& plan) {
  const std::string own = caf::to_string(sys.node());
  return [secret = plan.secret, job = plan.job_id, own, tls = plan.tls.any()](
             const char* role, const std::string& proof, const std::string& node) -> std::optional<join_refusal> {
    using monitoring::refusal;
    if (!proofs_match(join_proof(secret, job, role, node, own), proof))
      return join_refusal{refusal::unproven_join, "without proof of the job's secret"};
    if (!tls) return std::nullopt;
    const auto cert = certificate_of(node);
    if (!cert) return join_refusal{refusal::wrong_role, "that presented no certificate on a direct connection"};
    if (cert->role != role && cert->role != any_role)
      return join_refusal{refusal::wrong_role, "under the certificate " + cert->subject + ", which is for " +
                                                   (cert->role.empty() ? std::string("no role") : "the role " + cert->role)};
    spdlog::info("coordinator: {} node {} joins under the certificate {}", role, node, cert->subject);
    return std::nullopt;
  };
}

// Waits for `a` to terminate; none when it stopped normally or at the end of the job.
// coordinator_lost: it stopped because its coordinator went away.
caf::error wait_for(caf::actor_system& sys, const caf::actor& a, bool& coordinator_lost) {
  caf::scoped_actor self{sys};
  self->monitor(a);
  caf::error reason;
  bool done = false;
  self->receive_while([&] { return !done; })([&](caf::down_msg& dm) {
    reason = dm.reason;
    done = true;
  });
  if (reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown) return caf::none;
  if (reason == caf::exit_reason::remote_link_unreachable) {
    coordinator_lost = true;
    return make_error(errc::stalled, "lost the connection to the coordinator (it died, or the network failed)");
  }
  return reason;
}

// Unset, a stuck teardown leaves with 0 when the role succeeded and 1 otherwise.
stuck_teardown_exit or_default(stuck_teardown_exit f) {
  if (f) return f;
  return [](const caf::error& end) { return end ? 1 : 0; };
}

// Publishes the local actor's published interface on the plan's listen address; when that
// fails, stops the actor and says why.
template <class Published, class Local>
caf::expected<std::uint16_t> publish_role(caf::actor_system& sys, const Local& local, const node_plan& plan) {
  auto port = publish_on(sys, Published{local}, plan.listen, plan.tls.any());
  if (port) return port;
  caf::anon_send_exit(local, caf::exit_reason::user_shutdown);
  return make_error(errc::bad_job, "cannot listen on " + plan.listen.str() + ": " + describe(port.error()));
}

}  // namespace

std::string fast_path_tag(const node_plan& plan) {
  if (!plan.shared_memory) return {};
  std::string tag = shared_memory_tag(plan.secret, plan.job_id);
  if (const auto swept = shm::sweep(tag))
    spdlog::info("removed {} shared-memory segments that an ended process of job {} left behind", swept, plan.job_id);
  return tag;
}

// Reaches the coordinator at plan.join and checks it speaks this version's protocol.
// Nodes may start in any order, so a refused connection is retried until the deadline; so
// is one that went silent before its handshake finished (a coordinator under a flood of
// connections may close a handshake it could not tell from the flood's).
caf::expected<coordinator_actor> reach_coordinator(caf::actor_system& sys, const node_plan& plan) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + ms(plan.connect_timeout_s);
  std::set<std::string> sigs;
  if (plan.tls.any()) expect_peer(plan.join->host, plan.join->port, "coordinator");  // Note [Certificate roles]
  caf::expected<caf::strong_actor_ptr> ptr{caf::sec::request_timeout};
  for (auto pause = std::chrono::milliseconds(50);; pause = std::min(pause * 2, std::chrono::milliseconds(1000))) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left.count() <= 0) break;
    ptr = connect_to(sys, plan.tls.any(), *plan.join, left, sigs);
    if (ptr || (ptr.error() != caf::sec::cannot_connect_to_node && ptr.error() != caf::sec::connection_timeout)) break;
    std::this_thread::sleep_for(std::min(pause, left));
  }
  if (!ptr)
    return make_error(errc::stalled, "cannot reach the coordinator at " + plan.join->str() + ": " + describe(ptr.error()) +
                                         (plan.tls.any() ? " (is it running, with TLS and the same CA?)"
                                                         : " (is it running? does it expect TLS?)"));
  if (sigs != sys.message_types<coordinator_actor>())
    return make_error(errc::bad_job, "the actor at " + plan.join->str() +
                                         " is not a Troupe coordinator of this version; check the address and versions");
  return caf::actor_cast<coordinator_actor>(std::move(*ptr));
}

// This node's proof of the job's secret for joining `coordinator` as `role` (Note [Join
// proofs]); every node plan holds a secret.
std::string proof_for(caf::actor_system& sys, const node_plan& plan, const char* role,
                      const coordinator_actor& coordinator) {
  return join_proof(plan.secret, plan.job_id, role, caf::to_string(sys.node()), caf::to_string(coordinator->node()));
}

namespace {

// The job's end, concluded while the node's actor system still runs, and the teardown
// told how to leave if it hangs.
int conclude_before_teardown(node_system& node, caf::expected<job_result> result, const coordinator_end& end) {
  const int code = end.conclude(result);
  node.leave_if_stuck([code, if_stuck = end.if_stuck](const caf::error&) { return if_stuck(code); });
  return code;
}

}  // namespace

int run_coordinator_node(const node_plan& plan, const job_spec& job, const model& m,
                         std::shared_ptr<const dataset_split> data, job_callbacks cb, const observability& obs,
                         const std::function<void(const endpoint&)>& on_listening, const coordinator_end& end,
                         std::optional<resume_point> resume) {
  node_system node(plan);
  caf::actor_system& sys = node.sys();
  auto coordinator =
      spawn_coordinator(sys, job, m, std::move(data), std::move(cb), obs, gate_for(sys, plan), std::move(resume));
  auto port = publish_role<coordinator_actor>(sys, coordinator, plan);
  if (!port) return conclude_before_teardown(node, port.error(), end);
  on_listening(endpoint{plan.listen.host, *port});
  return conclude_before_teardown(node, await_job(sys, coordinator), end);
}

expected<lane::transport_options> lane_options_for(const node_plan& plan) {
  lane::transport_options o;
  if (plan.tls.any()) {
    auto ctx = tls_context_for(plan.tls);
    if (!ctx) return failure{"bulk lanes: " + ctx.error().message};
    o.tls = *ctx;
  }
  o.handshake_timeout = ms(plan.handshake_timeout_s);
  o.idle_timeout = ms(plan.connection_timeout_s);
  return o;
}

expected<std::shared_ptr<lane::shard_end>> shard_lanes_for(const node_plan& plan) {
  if (!plan.bulk_lanes) return std::shared_ptr<lane::shard_end>();
  auto o = lane_options_for(plan);
  if (!o) return o.error();
  auto end = lane::listen_for_members(plan.listen.host, plan.lane_port, std::move(*o));
  if (!end) {
    if (plan.lane_port != 0) return failure{end.error().message + " (--lane-port)"};
    spdlog::warn("{}; large tensors go in the actor messages", end.error().message);
    return std::shared_ptr<lane::shard_end>();
  }
  spdlog::info("bulk lanes: members may open theirs at {}", endpoint{plan.listen.host, (*end)->port()}.str());
  return std::shared_ptr<lane::shard_end>(*end);
}

expected<std::shared_ptr<lane::member_end>> member_lanes_for(const node_plan& plan) {
  if (!plan.bulk_lanes) return std::shared_ptr<lane::member_end>();
  auto o = lane_options_for(plan);
  if (!o) return o.error();
  return lane::dial_shards(std::move(*o));
}

expected<ring_lane_ends> ring_lanes_for(const node_plan& plan) {
  if (!plan.bulk_lanes) return ring_lane_ends{};
  auto o = lane_options_for(plan);
  if (!o) return o.error();
  lane::transport_options from_neighbour = *o;
  from_neighbour.scan_finite = false;  // ring pieces are sums, not gradients a shard must check
  from_neighbour.listener_name = "ring lane";
  from_neighbour.peer_name = "ring neighbour";
  ring_lane_ends ends;
  ends.listener = [host = plan.listen.host, port = plan.lane_port,
                   from_neighbour]() -> expected<std::shared_ptr<lane::shard_end>> {
    auto end = lane::listen_for_members(host, port, from_neighbour);
    if (!end) return end.error();
    spdlog::info("bulk lanes: the previous member of the ring may open its lane at {}", endpoint{host, (*end)->port()}.str());
    return std::shared_ptr<lane::shard_end>(*end);
  };
  lane::transport_options to_neighbour = *o;
  to_neighbour.dialled_role = "worker";
  ends.dialler = [to_neighbour] { return lane::dial_shards(to_neighbour); };
  return ends;
}

namespace {

// Note [Joining again]
// A shard server or a worker that its coordinator stops with `restarting` (Note
// [Restarting in place] in actors/coordinator_restart.cpp) joins the job again at once:
// a fresh actor system with the same plan, so the same ports, certificates and secret,
// and a worker keeps its dataset (kept_dataset). Tearing the old system down first closes every
// connection and shared-memory channel the old role had, so the new role starts as a
// node's first does. One whose coordinator is lost (killed, or its host gone) does the
// same with --coordinator-timeout S: it tries to reach the coordinator at its address
// for up to S seconds, so a coordinator restarted there with --resume (launch does
// that) takes it back, and the job goes on from its newest checkpoint. If none answers
// within S seconds the node leaves, saying so, as it does at once without the flag.
// Any other end of the role ends the node.
template <class Once>
caf::error joining_again(const char* role, node_plan plan, Once once) {
  const double connect_timeout_s = plan.connect_timeout_s;
  for (;;) {
    bool coordinator_lost = false;
    caf::error err = once(plan, coordinator_lost);
    plan.connect_timeout_s = connect_timeout_s;
    if (troupe_code(err) == errc::restarting) {
      spdlog::warn("{}: {}; joining again", role, describe(err));
      continue;
    }
    if (!coordinator_lost || plan.coordinator_timeout_s <= 0) return err;
    spdlog::warn("{}: {}; waiting up to {} s for it to come back at {} (--coordinator-timeout)", role, describe(err),
                 plan.coordinator_timeout_s, plan.join->str());
    plan.connect_timeout_s = plan.coordinator_timeout_s;  // how long reach_coordinator tries
  }
}

caf::error serve_once(const node_plan& plan, const observability& obs, const stuck_teardown_exit& if_stuck,
                      bool& coordinator_lost) {
  auto lanes = shard_lanes_for(plan);
  if (!lanes) return make_error(errc::bad_job, lanes.error().message);
  node_system node(plan);
  node.leave_if_stuck(if_stuck);
  caf::actor_system& sys = node.sys();
  auto coordinator = reach_coordinator(sys, plan);
  if (!coordinator) return node.ended(coordinator.error());
  auto shard = spawn_shard_server(sys, *coordinator, plan.job_id, ms(plan.connect_timeout_s), obs, fast_path_tag(plan),
                                  *lanes);
  node.watch_role(caf::actor_cast<caf::actor>(shard));
  auto port = publish_role<shard_actor>(sys, shard, plan);
  if (!port) return node.ended(port.error());
  spdlog::info("shard server of job {} listening on {}, joining {}", plan.job_id,
               endpoint{plan.advertise, *port}.str(), plan.join->str());
  join_as_shard(shard, plan.advertise, *port, proof_for(sys, plan, "server", *coordinator));
  return node.ended(wait_for(sys, caf::actor_cast<caf::actor>(shard), coordinator_lost));
}

// A worker node's dataset, kept from one join to the next (Note [Joining again]): a
// restart in place does not wait for it to be read or generated again (1.2 s for the
// synthetic set, 0.26 s for Fashion-MNIST, measured here).
class kept_dataset {
 public:
  expected<std::shared_ptr<const dataset_split>> load(const job_spec& job, const std::string& dir) {
    const std::string key = job.dataset + "|" + dir + "|" + std::to_string(job.train_samples) + "|" +
                            std::to_string(job.train.seed) + "|" + std::to_string(job.context);
    std::lock_guard<std::mutex> lock(mu_);
    if (split_ && key == key_) return split_;
    auto d = load_dataset(job.dataset, dir, job.train_samples, job.train.seed, job.context);
    if (!d) return d.error();
    split_ = std::make_shared<const dataset_split>(std::move(*d));
    key_ = key;
    return split_;
  }

 private:
  std::mutex mu_;
  std::string key_;
  std::shared_ptr<const dataset_split> split_;
};

caf::error work_once(const node_plan& plan, const std::string& data_dir, const observability& obs,
                     compute_options compute, kept_dataset& data, const stuck_teardown_exit& if_stuck,
                     bool& coordinator_lost) {
  auto lanes = member_lanes_for(plan);
  if (!lanes) return make_error(errc::bad_job, lanes.error().message);
  node_system node(plan);
  node.leave_if_stuck(if_stuck);
  caf::actor_system& sys = node.sys();
  auto coordinator = reach_coordinator(sys, plan);
  if (!coordinator) return node.ended(coordinator.error());
  stage_options opts;
  opts.job_id = plan.job_id;
  opts.wanted_rank = plan.wanted_rank;
  opts.join_timeout = ms(plan.connect_timeout_s);
  opts.connector = connector_of(sys, plan.tls.any());
  if (plan.tls.any())
    opts.expect_peer = [](const std::string& host, std::uint16_t port, const char* role) { expect_peer(host, port, role); };
  opts.obs = obs;
  opts.compute = compute;
  opts.fast_path_tag = fast_path_tag(plan);
  opts.doorbells = plan.doorbells;
  opts.lanes = *lanes;
  auto ring_lanes = ring_lanes_for(plan);
  if (!ring_lanes) return node.ended(make_error(errc::bad_job, ring_lanes.error().message));
  opts.ring_lanes = std::move(*ring_lanes);
  opts.data = [data_dir, &data](const job_spec& job) -> expected<std::shared_ptr<const dataset_split>> {
    return data.load(job, data_dir.empty() ? job.data_dir : data_dir);
  };
  // Published for its pipeline neighbours (a data-parallel worker is never contacted).
  auto worker = spawn_pipeline_stage(sys, *coordinator, opts);
  node.watch_role(caf::actor_cast<caf::actor>(worker));
  auto port = publish_role<stage_actor>(sys, worker, plan);
  if (!port) return node.ended(port.error());
  join_as_member(worker, plan.advertise, *port, proof_for(sys, plan, "worker", *coordinator));
  return node.ended(wait_for(sys, caf::actor_cast<caf::actor>(worker), coordinator_lost));
}

}  // namespace

caf::error run_server_node(const node_plan& plan, const observability& obs, stuck_teardown_exit if_stuck) {
  if_stuck = or_default(std::move(if_stuck));
  return joining_again("shard server", plan,
                       [&](const node_plan& p, bool& lost) { return serve_once(p, obs, if_stuck, lost); });
}

caf::error run_worker_node(const node_plan& plan, const std::string& data_dir, const observability& obs,
                           compute_options compute, stuck_teardown_exit if_stuck) {
  if_stuck = or_default(std::move(if_stuck));
  kept_dataset data;
  return joining_again("worker", plan, [&](const node_plan& p, bool& lost) {
    return work_once(p, data_dir, obs, compute, data, if_stuck, lost);
  });
}

}  // namespace troupe
