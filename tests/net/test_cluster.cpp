// Multi-process tests on loopback with the real troupe binary (net/node.cpp and the
// roles), every node with the job's certificate and secret as launch gives them: a
// cluster trains; a worker killed with SIGKILL is survived and its
// restarted replacement rejoins; a killed shard stops the job cleanly (both through the
// same-host fast path and, with --no-shared-memory, with their tensors on bulk lanes),
// or, when the job keeps checkpoints, restarts it in place once a server is started in
// its place, and ends it at the stall timeout when none is; nodes with
// --coordinator-timeout join a lost coordinator that comes back with --resume, and leave
// when it does not;
// when the coordinator dies or hangs, every node exits with a clear message. Every wait
// has a deadline.
#define BOOST_TEST_MODULE cluster
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <regex>
#include <thread>

#include "tests/support/background.hpp"
#include "tests/support/process.hpp"
#include "tests/support/secured_job.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// The coordinator listens on a port the kernel picks; the others join it there.
struct cluster {
  fs::path dir = fs::temp_directory_path() / ("troupe-cluster-" + std::to_string(::getpid()));
  job_pki pki;
  std::string port;
  std::vector<std::unique_ptr<background_process>> procs;
  std::vector<std::string> node_flags;  // for every server and worker

  cluster() { fs::create_directories(dir); }
  ~cluster() {
    procs.clear();
    fs::remove_all(dir);
  }
  std::string coord() const { return "127.0.0.1:" + port; }
  // Every process's state and stderr, for a failure's message.
  std::string logs() const {
    std::string all;
    for (const auto& p : procs) all += "---- " + p->state() + ":\n" + p->err();
    return all;
  }
  // A node holding certificate `cert` and the job's secret.
  background_process& start(const std::string& name, const std::string& cert, std::vector<std::string> args) {
    args.insert(args.begin(), {troupe_bin(), "node"});
    const auto tls = pki.tls(cert);
    args.insert(args.end(), tls.begin(), tls.end());
    procs.push_back(std::make_unique<background_process>(args, (dir / name).string()));
    BOOST_REQUIRE(procs.back()->started());
    return *procs.back();
  }
  background_process& coordinator(std::vector<std::string> job) {
    std::vector<std::string> args{"--role", "coordinator", "--listen", "127.0.0.1:0", "--dataset", "synthetic"};
    args.insert(args.end(), job.begin(), job.end());
    auto& p = start("coordinator", "coordinator", args);
    const auto bound = p.wait_for_port("listening on ", std::chrono::seconds(60));
    BOOST_REQUIRE_MESSAGE(bound.has_value(), "the coordinator never said where it listens: " << p.err());
    port = std::to_string(*bound);
    return p;
  }
  background_process& server(const std::string& name = "server") {
    return start(name, "server", cat({"--role", "server", "--join", coord(), "--heartbeat", "0.2",
                                      "--connection-timeout", "2"}, node_flags));
  }
  background_process& worker(const std::string& name) {
    return start(name, "worker", cat({"--role", "worker", "--join", coord(), "--heartbeat", "0.2",
                                      "--connection-timeout", "2"}, node_flags));
  }
  // A coordinator (procs[0]), a server (procs[1]) and a worker (procs[2]) of a slow job,
  // once its first epoch is over; returns the coordinator.
  background_process& one_epoch_in() {
    auto& coord = coordinator({"--train-samples", "20000", "--epochs", "3", "--workers", "1", "--servers", "1",
                               "--simulate-compute", "15", "--batch-size", "64"});
    server();
    worker("w0");
    BOOST_REQUIRE_MESSAGE(coord.wait_for_err("epoch 1/3", 120s), logs());
    return coord;
  }
};

// Whether the job in `dir` completes checkpoint `name` within 120 s.
bool checkpoint_written(const std::string& dir, const char* name) {
  const auto manifest = fs::path(dir) / name / "MANIFEST.tf";
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!fs::exists(manifest) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  return fs::exists(manifest);
}

nlohmann::json result_of(background_process& p) {
  BOOST_TEST_INFO("coordinator stderr: " << p.err());
  BOOST_REQUIRE(!p.out().empty());
  return nlohmann::json::parse(p.out());
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_loopback_cluster_trains) {
  cluster c;
  auto& coord = c.coordinator({"--train-samples", "6000", "--epochs", "2", "--workers", "2", "--servers", "1"});
  auto& s = c.server();
  auto& w0 = c.worker("w0");
  auto& w1 = c.worker("w1");
  const auto code = coord.wait(120s);
  BOOST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0, coord.err());
  const auto j = result_of(coord);
  BOOST_TEST(j["test_accuracy"].get<double>() > 0.8);
  BOOST_TEST(j["workers_lost"].get<int>() == 0);
  BOOST_TEST(j["samples_planned"].get<int>() == 6000 / 2 * 2 * 2);
  BOOST_TEST(j["samples_trained"].get<int>() == j["samples_planned"].get<int>());
  for (auto* p : {&s, &w0, &w1}) BOOST_TEST((p->wait(20s) == std::optional<int>(0)), p->err());
}

namespace {

// A worker of a sync job is killed after the first epoch and started again; the job ends
// well, its samples are trained by the survivor, and its log says the replacement
// rejoined. Returns the server's log.
std::string killed_worker_is_survived(const std::vector<std::string>& node_flags) {
  cluster c;
  c.node_flags = node_flags;
  auto& coord = c.coordinator({"--train-samples", "20000", "--epochs", "3", "--workers", "2", "--servers", "1",
                               "--mode", "sync", "--simulate-compute", "15", "--batch-size", "64"});
  auto& s = c.server();
  c.worker("w0");
  auto& w1 = c.worker("w1");
  BOOST_REQUIRE_MESSAGE(coord.wait_for_err("epoch 1/3", 120s), c.logs());
  w1.signal(SIGKILL);
  BOOST_REQUIRE_MESSAGE(coord.wait_for_err("is gone", 20s), coord.err());
  auto& again = c.worker("w1-again");
  const auto code = coord.wait(180s);
  BOOST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0, coord.err());
  const auto j = result_of(coord);
  BOOST_TEST(j["workers_lost"].get<int>() == 1);
  // Note [Dealing a lost worker's samples]: the rest of its second epoch went to the
  // survivor, whose steps take an eighth of a batch more than the lost share, which covers
  // the steps a grant cannot reach (the lookahead, and a grant that came back): every
  // sample is trained.
  BOOST_TEST(j["samples_redealt"].get<int>() > 0, coord.err());
  BOOST_TEST(j["samples_trained"].get<int>() == j["samples_planned"].get<int>(), coord.err());
  BOOST_TEST(coord.err().find("rejoined") != std::string::npos, coord.err());
  BOOST_TEST((again.wait(20s) == std::optional<int>(0)), again.err());
  s.wait(20s);
  return s.err() + again.err();
}

// The only server of a job is killed after the first epoch: the coordinator stops with
// exit code 3 (the job lost a node: a launcher may go on from a checkpoint) and both
// workers with 1, each with a message; none hangs. Returns the workers' logs.
std::string killed_shard_stops_the_job(const std::vector<std::string>& node_flags) {
  cluster c;
  c.node_flags = node_flags;
  auto& coord = c.coordinator({"--train-samples", "20000", "--epochs", "3", "--workers", "2", "--servers", "1",
                               "--simulate-compute", "15", "--batch-size", "64"});
  auto& s = c.server();
  auto& w0 = c.worker("w0");
  auto& w1 = c.worker("w1");
  BOOST_REQUIRE_MESSAGE(coord.wait_for_err("epoch 1/3", 120s), c.logs());
  s.signal(SIGKILL);
  const auto code = coord.wait(30s);
  BOOST_REQUIRE_MESSAGE(code.has_value(), "the coordinator did not stop after its shard died");
  BOOST_TEST(*code == 3);
  BOOST_TEST(coord.err().find("shard 0 died") != std::string::npos, coord.err());
  for (auto* w : {&w0, &w1}) {
    const auto wc = w->wait(30s);
    BOOST_REQUIRE(wc.has_value());
    BOOST_TEST(*wc == 1);
  }
  return w0.err() + w1.err();
}

// Note [Restarting in place]: the second of two servers of a job that keeps checkpoints
// is killed after checkpoint 20. The other nodes join again by themselves; with
// `replace`, the operator then starts a server in its place, the job goes on from its
// newest checkpoint and ends well, every node with exit code 0; without, --stall-timeout
// ends the job with code 3, saying what to start. Returns the coordinator's log.
std::string killed_shard_restarts_in_place(const std::vector<std::string>& node_flags, bool replace) {
  cluster c;
  c.node_flags = node_flags;
  const std::string ck = (c.dir / "ck").string();
  auto& coord = c.coordinator({"--train-samples", "6000", "--epochs", "2", "--workers", "2", "--servers", "2",
                               "--mode", "sync", "--batch-size", "50", "--slow-worker", "0:3", "--stall-timeout", "8",
                               "--checkpoint-dir", ck, "--checkpoint-every", "20"});
  auto& s0 = c.server("s0");
  auto& s1 = c.server("s1");
  auto& w0 = c.worker("w0");
  auto& w1 = c.worker("w1");
  BOOST_REQUIRE_MESSAGE(checkpoint_written(ck, "ckpt-000000000020"), c.logs());
  s1.signal(SIGKILL);
  BOOST_REQUIRE_MESSAGE(coord.wait_for_err("restarts in place", 30s), coord.err());
  if (!replace) {
    const auto code = coord.wait(60s);
    BOOST_REQUIRE_MESSAGE(code.has_value(), "the coordinator waited past --stall-timeout for a replacement");
    BOOST_TEST(*code == 3, coord.err());
    BOOST_TEST(coord.err().find("1 of 2 shards") != std::string::npos, coord.err());
    BOOST_TEST(coord.err().find("troupe node --role server --join") != std::string::npos, coord.err());
    for (auto* p : {&s0, &w0, &w1}) BOOST_TEST(p->wait(30s).has_value(), p->err());
    return coord.err();
  }
  auto& again = c.server("s1-again");
  const auto code = coord.wait(120s);
  BOOST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0, coord.err());
  const auto j = result_of(coord);
  BOOST_TEST(j["restarts_in_place"] == 1);
  BOOST_TEST(j["resumed_from_step"].get<int>() >= 20);
  BOOST_TEST(j["steps_replayed"].is_number_integer(), j.dump());
  BOOST_TEST(j["samples_trained"].get<int>() > 0);
  for (auto* p : {&s0, &w0, &w1, &again}) BOOST_TEST((p->wait(20s) == std::optional<int>(0)), p->err());
  // Note [Joining again]: the nodes that outlived the shard joined again in-process.
  for (auto* p : {&s0, &w0, &w1}) BOOST_TEST(p->err().find("joining again") != std::string::npos, p->err());
  return coord.err();
}

// Note [Joining again]: the coordinator of a job that keeps checkpoints is killed after
// checkpoint 20. Its servers and workers, given --coordinator-timeout, wait for it; with
// `restart`, a coordinator started again on its address with --resume takes them back
// and the job ends well, every node with exit code 0; without, they leave once the
// timeout has passed, saying they cannot reach it.
void lost_coordinator(bool restart) {
  cluster c;
  c.node_flags = {"--coordinator-timeout", restart ? "60" : "2"};
  const std::string ck = (c.dir / "ck").string();
  const std::vector<std::string> job{"--train-samples", "6000", "--epochs", "2",
                                     "--workers", "2", "--servers", "1", "--mode", "sync", "--batch-size", "50",
                                     "--slow-worker", "0:3", "--checkpoint-dir", ck, "--checkpoint-every", "20"};
  auto& first = c.coordinator(job);
  auto& s = c.server();
  auto& w0 = c.worker("w0");
  auto& w1 = c.worker("w1");
  BOOST_REQUIRE_MESSAGE(checkpoint_written(ck, "ckpt-000000000020"), c.logs());
  first.signal(SIGKILL);
  // The nodes' wait is counted from the coordinator's death, not from the signal: a
  // process in an uninterruptible wait (a checkpoint's fsync on a busy disk) dies later.
  BOOST_REQUIRE_MESSAGE(first.wait(60s).has_value(), "the coordinator outlived SIGKILL: " << c.logs());
  if (!restart) {
    for (auto* p : {&s, &w0, &w1}) {
      const auto code = p->wait(30s);
      BOOST_REQUIRE_MESSAGE(code.has_value(), "a node waited past --coordinator-timeout: " << p->err());
      BOOST_TEST(*code == 1);
      BOOST_TEST(p->err().find("waiting up to 2 s for it to come back") != std::string::npos, p->err());
      BOOST_TEST(p->err().find("cannot reach the coordinator") != std::string::npos, p->err());
    }
    return;
  }
  for (auto* p : {&s, &w0, &w1}) BOOST_REQUIRE_MESSAGE(p->wait_for_err("waiting up to 60 s", 30s), c.logs());
  std::vector<std::string> again{"--role", "coordinator", "--listen", c.coord(), "--dataset", "synthetic",
                                 "--resume", ck};
  again.insert(again.end(), job.begin(), job.end());
  auto& second = c.start("coordinator-again", "coordinator", again);
  const auto code = second.wait(120s);
  BOOST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0, second.err());
  const auto j = result_of(second);
  BOOST_TEST(j["resumed_from_step"].get<int>() >= 20);
  BOOST_TEST(j["steps_replayed"].is_null());  // a coordinator killed outright records nothing
  for (auto* p : {&s, &w0, &w1}) BOOST_TEST((p->wait(20s) == std::optional<int>(0)), p->err());
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_lost_coordinator_started_again_with_resume_takes_its_nodes_back) { lost_coordinator(true); }

BOOST_AUTO_TEST_CASE(nodes_leave_when_their_lost_coordinator_is_not_back_within_their_timeout) {
  lost_coordinator(false);
}

BOOST_AUTO_TEST_CASE(a_killed_shard_replaced_by_hand_restarts_the_job_in_place) {
  killed_shard_restarts_in_place({}, true);
}

BOOST_AUTO_TEST_CASE(a_killed_shard_not_replaced_ends_the_job_at_the_stall_timeout_naming_what_to_start) {
  killed_shard_restarts_in_place({"--no-shared-memory"}, false);
}

BOOST_AUTO_TEST_CASE(a_killed_worker_is_survived_and_its_replacement_rejoins) { killed_worker_is_survived({}); }

// Note [Bulk lanes]: the dead worker's lane closes on the shard, and its replacement opens
// one of its own under the same rank.
BOOST_AUTO_TEST_CASE(a_killed_worker_on_a_bulk_lane_is_survived_and_its_replacement_opens_one) {
  const std::string logs = killed_worker_is_survived({"--no-shared-memory"});
  // (Ranks go by join order, so the killed process may hold either.)
  BOOST_TEST(std::regex_search(logs, std::regex("the bulk lane of worker [01] closed")), logs);
  BOOST_TEST(logs.find("exchanges large tensors with shard 0 over a bulk lane") != std::string::npos, logs);
}

BOOST_AUTO_TEST_CASE(a_killed_shard_stops_the_job_cleanly) { killed_shard_stops_the_job({}); }

BOOST_AUTO_TEST_CASE(a_killed_shard_with_bulk_lanes_stops_the_job_cleanly) {
  const std::string logs = killed_shard_stops_the_job({"--no-shared-memory"});
  BOOST_TEST(logs.find("over a bulk lane") != std::string::npos, logs);
}

BOOST_AUTO_TEST_CASE(when_the_coordinator_dies_every_node_exits_with_a_message) {
  cluster c;
  auto& coord = c.one_epoch_in();
  coord.signal(SIGKILL);
  for (auto* p : {c.procs[1].get(), c.procs[2].get()}) {
    const auto code = p->wait(15s);
    BOOST_REQUIRE_MESSAGE(code.has_value(), "a node kept running after the coordinator died");
    BOOST_TEST(*code == 1);
    BOOST_TEST(p->err().find("lost the connection to the coordinator") != std::string::npos, p->err());
  }
}

BOOST_AUTO_TEST_CASE(a_hung_coordinator_is_detected_by_heartbeats) {
  cluster c;
  auto& coord = c.one_epoch_in();
  coord.signal(SIGSTOP);  // alive but silent: only heartbeats can tell
  for (auto* p : {c.procs[1].get(), c.procs[2].get()}) {
    const auto code = p->wait(20s);
    BOOST_REQUIRE_MESSAGE(code.has_value(), "a node kept waiting on a hung coordinator");
    BOOST_TEST(*code == 1);
  }
  coord.signal(SIGKILL);
}
