// Members are identities (Note [Members are identities] in actors/protocol.hpp), with
// real processes on loopback: while a TLS job trains, a CAF peer built from Troupe's own
// protocol and holding the job's worker certificate pushes forged gradients and pulls as
// worker 0, asks the shard for snapshots and statistics, restarts it and removes worker 0
// as if it were the coordinator, and sends the coordinator step, epoch, done and group
// reports as rank 0 and checkpoint reports as shard 0. Every one is refused and counted, the job ends with its normal
// result, and its final parameters are bitwise those of the same job unattacked.
#define BOOST_TEST_MODULE impersonation
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <regex>
#include <set>

#include "actors/protocol.hpp"
#include "net/node_options.hpp"
#include "net/node_runtime.hpp"
#include "tests/support/secured_job.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

// A 1-worker, 1-server sync job of a few seconds, every node with its own certificate.
struct live_job {
  temp_dir dir{"impersonation"};
  std::unique_ptr<background_process> coord, server, worker;
  int coord_port = 0, coord_metrics = 0, server_port = 0, server_metrics = 0;

  explicit live_job(const job_pki& pki) {
    coord = std::make_unique<background_process>(
        cat({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:0", "--job-id", "identity-job",
             "--dataset", "synthetic", "--train-samples", "20000", "--epochs", "2", "--workers", "1", "--servers", "1",
             "--mode", "sync"},
            pki.tls("coordinator")),
        dir.file("coordinator"));
    coord_port = port_of(*coord, "listening on ");
    coord_metrics = port_of(*coord, "metrics on http://");
    const std::string at = "127.0.0.1:" + std::to_string(coord_port);
    server = std::make_unique<background_process>(
        cat({troupe_bin(), "node", "--role", "server", "--join", at, "--job-id", "identity-job"}, pki.tls("server")),
        dir.file("server"));
    server_port = port_of(*server, "listening on ");
    server_metrics = port_of(*server, "metrics on http://");
    worker = std::make_unique<background_process>(
        cat({troupe_bin(), "node", "--role", "worker", "--join", at, "--job-id", "identity-job"}, pki.tls("worker")),
        dir.file("worker"));
  }
  static int port_of(background_process& p, const std::string& prefix) {
    const auto port = p.wait_for_port(prefix, 60s);
    BOOST_REQUIRE_MESSAGE(port.has_value(), p.err());
    return *port;
  }
  bool training() { return worker->wait_for_err("samples per epoch", 60s); }
  // The job's result line, once it ended normally with its worker.
  nlohmann::json result() {
    const auto code = coord->wait(120s);
    BOOST_REQUIRE_MESSAGE(code.has_value(), "the job did not end: " << coord->err());
    BOOST_REQUIRE_MESSAGE(*code == 0, coord->err() << worker->err() << server->err());
    BOOST_TEST((worker->wait(20s) == std::optional<int>(0)), worker->err());
    return nlohmann::json::parse(coord->out());
  }
};

// A CAF node of its own, holding what a worker holds: the job's worker certificate and its
// secret.
struct attacker {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  bool tls = true;

  explicit attacker(const job_pki& pki) {
    node_options o;
    o.role = node_role::worker;
    o.join = "127.0.0.1:1";  // (required by the role; the attacker connects by hand)
    o.tls = {pki.pem("worker"), pki.pem("worker"), pki.ca(), ""};
    o.secret_file = pki.secret();
    o.job_id = "identity-job";
    auto plan = resolve_node_options(o);
    BOOST_REQUIRE_MESSAGE(plan.has_value(), (plan ? std::string() : plan.error().message));
    configure_node(cfg, *plan);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  template <class Handle>
  Handle reach(int port) {
    std::set<std::string> sigs;
    auto ptr = connect_to(*sys, tls, endpoint{"127.0.0.1", static_cast<std::uint16_t>(port)}, 10s, sigs);
    BOOST_REQUIRE_MESSAGE(static_cast<bool>(ptr), (ptr ? std::string() : describe(ptr.error())));
    return caf::actor_cast<Handle>(*ptr);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_certificate_holder_cannot_act_as_another_member_or_role, job_pki) {
  std::string unattacked;
  {
    live_job reference(*this);
    const auto r = reference.result();
    unattacked = r["params_fnv1a"].get<std::string>();
  }

  live_job job(*this);
  BOOST_REQUIRE_MESSAGE(job.training(), job.worker->err());
  attacker a(*this);
  auto shard = a.reach<shard_actor>(job.server_port);
  auto coordinator = a.reach<coordinator_actor>(job.coord_port);
  caf::scoped_actor self{*a.sys};
  std::vector<std::string> answers;
  auto refused = [&](caf::error& e) { answers.push_back(describe(e)); };
  const auto wait = 10s;

  // As worker 0, against the shard: a pull, then forged gradients, sized as a refusal
  // would reveal ("... has N floats") if the shard said more than "refused".
  tensor forged({1});
  self->request(shard, wait, pull_atom::value, step_pull(0, 0, 0, 0))
      .receive([&](const kv_pull_reply&) { answers.push_back("a pull was served"); }, refused);
  for (std::int64_t clock = 0; clock < 50; clock += 10) {
    self->request(shard, wait, push_atom::value, step_push(0, 0, 0, clock, clock, forged))
        .receive([&](const kv_push_ack&) { answers.push_back("a push was applied"); }, refused);
    std::smatch size;
    if (std::regex_search(answers.back(), size, std::regex("has ([0-9]+) floats"))) {
      forged = tensor({std::stoll(size[1].str())});
      for (std::int64_t i = 0; i < forged.numel(); ++i) forged.data<float>()[i] = 1000.f;
    }
  }
  // As the coordinator, against the shard.
  self->request(shard, wait, snapshot_atom::value)
      .receive([&](const params_reply&) { answers.push_back("a snapshot was served"); }, refused);
  self->request(shard, wait, stats_atom::value)
      .receive([&](const shard_stats&) { answers.push_back("statistics were served"); }, refused);
  const member_identity me = identity_of(caf::actor_cast<caf::strong_actor_ptr>(self));
  self->request(shard, wait, start_atom::value, shard_start{membership{{0}, {0}, 0}, {me}})
      .receive([&](caf::ok_atom) { answers.push_back("a start was taken"); }, refused);
  self->request(shard, wait, join_atom::value, shard_admit{{0, 0}, me})
      .receive([&](caf::ok_atom) { answers.push_back("an admission was taken"); }, refused);
  self->send(shard, left_atom::value, std::uint32_t{0});
  // As rank 0, against the coordinator: reports that would end the job at once.
  self->send(coordinator, progress_atom::value, step_report{0, 1000000, 5, 0.0, 128, 0.1, 0, 0});
  self->send(coordinator, epoch_atom::value, worker_epoch{0, 0, 1.0, 1, 128, 0.1, {}});
  self->send(coordinator, epoch_atom::value, worker_epoch{0, 1, 1.0, 1, 128, 0.1, {}});
  self->send(coordinator, done_atom::value, worker_done{0, 1000000, 0, 0});
  self->send(coordinator, group_atom::value, group_id{0, {1, 2, 3}});
  // As shard 0, against the coordinator: its word about a checkpoint's files.
  self->send(coordinator, checkpoint_atom::value, checkpoint_saved{0, 1, 1, "shard-0.tf", ""});
  self->send(coordinator, checkpoint_atom::value, checkpoint_begun{0, 1});

  BOOST_TEST(answers.size() == 10u);
  for (const auto& answer : answers) BOOST_TEST(answer == "not_member: refused", "the shard answered: " << answer);
  // Counted by the nodes (read while they still run; the reports are one-way sends).
  const auto counted = [](int port, const char* reason, double expected) {
    for (int i = 0; i < 100 && refusals_at(port, reason) < expected; ++i) std::this_thread::sleep_for(20ms);
    return refusals_at(port, reason);
  };
  BOOST_TEST(counted(job.server_metrics, "not_a_member", 6) == 6);
  BOOST_TEST(counted(job.server_metrics, "not_the_coordinator", 5) == 5);
  BOOST_TEST(counted(job.coord_metrics, "not_a_member", 7) == 7);
  BOOST_TEST(job.worker->running(), "the job should still be training after the attack; make it longer");

  const auto r = job.result();
  BOOST_TEST(r["epochs"].get<int>() == 2);
  BOOST_TEST(r["workers_lost"].get<int>() == 0);
  BOOST_TEST(r["rejected_messages"].get<int>() == 0);
  BOOST_TEST(r["params_fnv1a"].get<std::string>() == unattacked, "the attack changed the trained parameters");
}
