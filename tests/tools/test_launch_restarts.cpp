// Tests for tools/launch_restarts.cpp (Note [Restarting a job]): a node killed from
// outside or a coordinator saying its job lost a node is a lost node, a node launch
// stopped or a job that failed otherwise is not; the next attempt's coordinator resumes
// from the newest complete checkpoint (replacing an earlier --resume), and without one
// starts as before. Note [Leaving out lost workers]: a worker killed from outside or whose
// ssh session ended with 255 is left out with its replica's other stages, the survivors
// are numbered again (in argv and in ssh's command string) and the coordinator told their
// number; too few survivors leave the nodes as they were and say so; and --min-workers is
// refused, saying why, where it cannot apply. Note [Restarting in place]: which lost
// processes are started again alone.
#define BOOST_TEST_MODULE launch_restarts
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include "core/checkpoint_store.hpp"
#include "core/job.hpp"
#include "tensor/tensor_file.hpp"
#include "tests/support/temp_dir.hpp"
#include "tools/cli_common.hpp"
#include "tools/launch_restarts.hpp"

using namespace troupe;
using namespace troupe::cli;

namespace {

group_result ended(std::vector<child_result> children) {
  group_result g;
  g.children = std::move(children);
  return g;
}

child_spec node(std::string name, std::vector<std::string> argv) { return {std::move(name), std::move(argv), false, {}}; }

std::vector<child_spec> local_job(int workers) {
  std::vector<child_spec> nodes{node("coordinator", {"troupe", "node", "--role", "coordinator"})};
  for (int i = 0; i < workers; ++i)
    nodes.push_back(node("worker " + std::to_string(i),
                         {"troupe", "node", "--role", "worker", "--worker-index", std::to_string(i)}));
  return nodes;
}

std::vector<std::string> names(const std::vector<child_spec>& nodes) {
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(n.name);
  return out;
}

using strings = std::vector<std::string>;

}  // namespace

BOOST_AUTO_TEST_CASE(a_lost_node_is_one_killed_from_outside_or_named_by_the_coordinator) {
  BOOST_TEST(lost_a_node(ended({{"coordinator", 1, 0, false}, {"server 0", -1, SIGKILL, false}})));
  BOOST_TEST(lost_a_node(ended({{"coordinator", exit_node_lost, 0, false}, {"server 0", 1, 0, false}})));
  BOOST_TEST(lost_a_node(ended({{"coordinator", -1, SIGKILL, false}, {"worker 0", 1, 0, false}})));
  // launch stopped it after the job ended, or the job failed for its own reasons.
  BOOST_TEST(!lost_a_node(ended({{"coordinator", 1, 0, false}, {"worker 0", -1, SIGTERM, true}})));
  BOOST_TEST(!lost_a_node(ended({{"coordinator", exit_failed, 0, false}, {"worker 0", 1, 0, false}})));
}

BOOST_AUTO_TEST_CASE(the_next_coordinator_resumes_from_the_newest_complete_checkpoint) {
  test::temp_dir dir("launch-restarts");
  std::vector<child_spec> nodes{{"coordinator", {"troupe", "node", "--resume", "old"}, true, {}},
                                {"server 0", {"troupe", "node"}, false, {}}};
  resume_next_attempt(nodes, dir.path.string());  // no checkpoint yet: as before
  BOOST_TEST(nodes[0].argv == (std::vector<std::string>{"troupe", "node", "--resume", "old"}),
             boost::test_tools::per_element());
  const checkpoint_store store(dir.path, 2);
  auto d = store.begin(20);
  BOOST_REQUIRE(d.has_value());
  BOOST_REQUIRE(!write_tensor_file(*d / "shard-0.tf", "test", {}, {}));
  BOOST_REQUIRE(!store.commit(20, {"shard-0.tf"}, {}));
  resume_next_attempt(nodes, dir.path.string());
  BOOST_TEST(nodes[0].argv == (std::vector<std::string>{"troupe", "node", "--resume", dir.path.string()}),
             boost::test_tools::per_element());
  BOOST_TEST(nodes[1].argv == (std::vector<std::string>{"troupe", "node"}), boost::test_tools::per_element());
}

// Note [Restarting in place]: with checkpoints, a lost coordinator is started again alone
// (resuming from the newest complete checkpoint) and the nodes wait for it; a lost server
// too when the job restarts in place. Without checkpoints, nothing is started again alone.
BOOST_AUTO_TEST_CASE(lost_processes_are_started_again_alone_when_the_job_keeps_checkpoints) {
  test::temp_dir dir("launch-respawns");
  job_spec job;
  job.servers = 1;
  restart_policy p;
  p.max_restarts = 2;
  auto nodes = local_job(1);
  nodes.push_back(node("server 0", {"troupe", "node", "--role", "server"}));
  respawn_lost_nodes(nodes, job, p);  // no checkpoints: whole restarts only
  for (const auto& n : nodes) BOOST_TEST(n.respawns == 0, n.name);
  p.checkpoints = dir.path.string();
  respawn_lost_nodes(nodes, job, p);
  BOOST_TEST(nodes[0].respawns == 2);
  BOOST_TEST(nodes[1].respawns == 0);  // a lost worker is survived by the job, or restarts it
  BOOST_TEST(nodes[2].respawns == 2);
  for (std::size_t i : {1u, 2u})
    BOOST_TEST(nodes[i].argv.back() == coordinator_wait_s, nodes[i].name);
  // The coordinator's next start resumes once there is a complete checkpoint.
  child_spec next = nodes[0];
  next.before_respawn(next);
  BOOST_TEST(next.argv == nodes[0].argv, boost::test_tools::per_element());
  const checkpoint_store store(dir.path, 2);
  auto d = store.begin(20);
  BOOST_REQUIRE(d.has_value());
  BOOST_REQUIRE(!write_tensor_file(*d / "shard-0.tf", "test", {}, {}));
  BOOST_REQUIRE(!store.commit(20, {"shard-0.tf"}, {}));
  next.before_respawn(next);
  BOOST_TEST(next.argv == (strings{"troupe", "node", "--role", "coordinator", "--resume", dir.path.string()}),
             boost::test_tools::per_element());
  job.checkpoints.on_shard_loss = shard_loss::fail;  // a lost server restarts the whole job instead
  auto failing = local_job(1);
  failing.push_back(node("server 0", {"troupe", "node", "--role", "server"}));
  respawn_lost_nodes(failing, job, p);
  BOOST_TEST(failing[2].respawns == 0);
  BOOST_TEST(failing[0].respawns == 2);
}

BOOST_AUTO_TEST_CASE(a_killed_worker_is_left_out_and_the_survivors_are_numbered_again) {
  auto nodes = local_job(3);
  const auto g = ended({{"coordinator", exit_node_lost, 0, false},
                        {"worker 0", 1, 0, false},
                        {"worker 1", -1, SIGKILL, false},
                        {"worker 2", 1, 0, false}});
  const auto out = leave_out_lost_workers(nodes, g, 3, 1, 2);
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  BOOST_TEST(out->workers == strings{"worker 1"}, boost::test_tools::per_element());
  BOOST_TEST(out->replicas == 2u);
  BOOST_TEST(names(nodes) == (strings{"coordinator", "worker 0", "worker 1"}), boost::test_tools::per_element());
  BOOST_TEST(nodes[0].argv == (strings{"troupe", "node", "--role", "coordinator", "--workers", "2"}),
             boost::test_tools::per_element());
  BOOST_TEST(nodes[1].argv.back() == "0");
  BOOST_TEST(nodes[2].argv.back() == "1");  // worker 2 goes on as worker 1

  // The next loss leaves 1 replica, fewer than 2: refused, and the nodes stay.
  const auto before = nodes;
  const auto again = ended({{"coordinator", exit_node_lost, 0, false},
                            {"worker 0", 1, 0, false},
                            {"worker 1", -1, SIGSEGV, false}});
  const auto too_few = leave_out_lost_workers(nodes, again, 2, 1, 2);
  BOOST_REQUIRE(!too_few.has_value());
  BOOST_TEST(too_few.error().message.find("worker 1 lost for good") != std::string::npos, too_few.error().message);
  BOOST_TEST(too_few.error().message.find("fewer than --min-workers 2") != std::string::npos);
  BOOST_TEST(too_few.error().message.find("--resume") != std::string::npos);
  BOOST_TEST(names(nodes) == names(before), boost::test_tools::per_element());
  BOOST_TEST(nodes[0].argv == before[0].argv, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_worker_whose_ssh_session_ended_with_255_is_lost_with_its_host) {
  std::vector<child_spec> nodes{
      node("coordinator", {"ssh", "h0", "troupe node --role coordinator --stop-when-stdin-closes"})};
  for (int i = 0; i < 3; ++i)
    nodes.push_back(node("worker " + std::to_string(i) + " @h" + std::to_string(i),
                         {"ssh", "-o", "BatchMode=yes", "h" + std::to_string(i),
                          "troupe node --role worker --worker-index " + std::to_string(i) +
                              " --stop-when-stdin-closes"}));
  const auto g = ended({{"coordinator", exit_node_lost, 0, false},
                        {"worker 0 @h0", 1, 0, false},
                        {"worker 1 @h1", 255, 0, false},
                        {"worker 2 @h2", 1, 0, false}});
  const auto out = leave_out_lost_workers(nodes, g, 3, 1, 1);
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  BOOST_TEST(out->workers == strings{"worker 1 @h1"}, boost::test_tools::per_element());
  BOOST_TEST(names(nodes) == (strings{"coordinator", "worker 0 @h0", "worker 1 @h2"}), boost::test_tools::per_element());
  BOOST_TEST(nodes[2].argv.back() == "troupe node --role worker --worker-index 1 --stop-when-stdin-closes");
  BOOST_TEST(nodes[2].argv[3] == "h2");
  BOOST_TEST((nodes[0].argv == strings{"ssh", "h0", "troupe node --role coordinator --stop-when-stdin-closes",
                                       "--workers", "2"}));
}

BOOST_AUTO_TEST_CASE(a_lost_stage_takes_its_whole_replica_with_it) {
  auto nodes = local_job(4);  // 2 replicas of 2 stages: workers 0-1 and 2-3
  const auto g = ended({{"coordinator", exit_node_lost, 0, false}, {"worker 3", -1, SIGKILL, false}});
  const auto out = leave_out_lost_workers(nodes, g, 2, 2, 1);
  BOOST_REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.error().message));
  BOOST_TEST(out->replicas == 1u);
  BOOST_TEST(names(nodes) == (strings{"coordinator", "worker 0", "worker 1"}), boost::test_tools::per_element());
  BOOST_TEST(nodes[2].argv.back() == "1");
  BOOST_TEST(nodes[0].argv.back() == "1");  // --workers 1
}

BOOST_AUTO_TEST_CASE(workers_that_failed_or_were_stopped_are_not_lost_for_good) {
  auto nodes = local_job(2);
  const auto before = nodes;
  const auto g = ended({{"coordinator", exit_node_lost, 0, false},
                        {"worker 0", 1, 0, false},
                        {"worker 1", -1, SIGTERM, true}});
  const auto out = leave_out_lost_workers(nodes, g, 2, 1, 1);
  BOOST_REQUIRE(out.has_value());
  BOOST_TEST(out->workers.empty());
  BOOST_TEST(names(nodes) == names(before), boost::test_tools::per_element());
  BOOST_TEST(nodes[0].argv == before[0].argv, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(min_workers_is_refused_where_it_cannot_apply) {
  job_spec job;
  job.mode = sync_mode::allreduce;
  job.workers = 3;
  job.servers = 0;
  job.checkpoints.dir = "ckpt";
  for (std::uint32_t n : {0u, 2u, 3u}) {
    job.min_workers = n;
    BOOST_TEST(!elastic_refusal(job, 3).has_value());
    BOOST_TEST(!validate(job).has_value());
  }
  const auto says = [](const std::optional<std::string>& why, const std::string& what) {
    BOOST_REQUIRE(why.has_value());
    BOOST_TEST(why->find(what) != std::string::npos, *why);
  };
  job.min_workers = 2;
  says(elastic_refusal(job, 0), "--max-restarts");
  auto no_dir = job;
  no_dir.checkpoints.dir.clear();
  says(elastic_refusal(no_dir, 3), "give --checkpoint-dir DIR");
  auto too_many = job;
  too_many.min_workers = 4;
  says(validate(too_many), "more than the job's 3 workers");
  auto sync = job;
  sync.mode = sync_mode::sync;
  sync.servers = 1;
  says(validate(sync), "sync training jobs go on without a lost worker already");
  // A key-value job shrinks by itself, and needs neither checkpoints nor restarts for it.
  auto kv = sync;
  kv.kv = true;
  kv.checkpoints.dir.clear();
  BOOST_TEST(!validate(kv).has_value());
  BOOST_TEST(!elastic_refusal(kv, 0).has_value());
}
