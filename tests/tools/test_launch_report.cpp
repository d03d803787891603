// Tests for tools/launch_report.cpp: a dry run prints its commands (and the teardown only
// when the job directory is not kept); after a job, the JSON line gains "restarts" for a
// training job and not for a key-value one, each failed process gets a line, and the
// coordinator's exit code is what launch returns; a worker that the job counted lost and
// went on without does not fail the launch.
#define BOOST_TEST_MODULE launch_report
#include <boost/test/unit_test.hpp>

#include <iostream>
#include <sstream>
#include <string>

#include "tools/launch_report.hpp"

using namespace troupe;
using namespace troupe::cli;

namespace {

// Runs f with std::cout and std::cerr captured.
template <class F>
std::pair<std::string, std::string> captured(F f) {
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  f();
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {out.str(), err.str()};
}

child_spec named(std::string name, std::vector<std::string> argv) {
  child_spec c;
  c.name = std::move(name);
  c.argv = std::move(argv);
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_dry_run_prints_its_commands_and_what_it_wrote) {
  launch_plan plan;
  plan.setup = {named("mkdir", {"mkdir", "-p", "/j"})};
  plan.nodes = {named("coordinator", {"troupe", "node", "--role", "coordinator"})};
  plan.teardown = {named("rm", {"rm", "-rf", "/j"})};
  launch_request req;
  req.job_dir = "/j";
  req.tls = true;
  const auto [out, err] = captured([&] { print_dry_run(plan, req, false); });
  BOOST_TEST(out == "mkdir -p /j\ntroupe node --role coordinator &\nwait\nrm -rf /j\n");
  BOOST_TEST(err.find("nothing was written") != std::string::npos);
  BOOST_TEST(err.find("add --keep-job-dir") != std::string::npos);
  const auto [kept_out, kept_err] = captured([&] { print_dry_run(plan, req, true); });
  BOOST_TEST(kept_out.find("rm -rf") == std::string::npos);  // the kept directory is not removed
  BOOST_TEST(kept_err.find("/j holds job.toml, the CA and the node certificates") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_outcome_is_the_json_line_the_failed_processes_and_the_coordinators_code) {
  group_result g;
  g.collected = {"starting", "{\"test_accuracy\":0.88}"};
  g.children = {{"coordinator", 0, 0, false}, {"worker 1", -1, 9, false}, {"server 0", 0, 0, false, 2}};
  launch_outcome r;
  const auto [out, err] = captured([&] { r = report_outcome(g, 2, false); });
  // Note [Restarting in place]: server 0 was started again twice; its last run ended well.
  BOOST_TEST(out == "{\"test_accuracy\":0.88,\"restarts\":2,\"respawned\":{\"server 0\":2}}\n");
  BOOST_TEST(err == "launch: worker 1 failed (signal 9)\n");
  BOOST_TEST(r.coordinator_code == 0);
  BOOST_TEST(r.others_failed == 1);
  BOOST_TEST(!r.others_ended_well());  // the job did not say it went on without worker 1
  // The workers' --precision, which launch passed them, is added when given.
  const auto [with_precision, ignored] = captured([&] { r = report_outcome(g, 0, false, nullptr, "bf16"); });
  BOOST_TEST(with_precision ==
             "{\"test_accuracy\":0.88,\"restarts\":0,\"respawned\":{\"server 0\":2},\"precision\":\"bf16\"}\n");
  // A key-value job's line gets the restarts and the servers started again (Note
  // [Replacing a key-value shard]), but no precision: its workers are users' programs.
  g.children = {{"coordinator", 4, 0, false}, {"server 1", 0, 0, false, 1}};
  const auto [kv_out, kv_err] = captured([&] { r = report_outcome(g, 1, true, nullptr, "bf16"); });
  BOOST_TEST(kv_out == "{\"test_accuracy\":0.88,\"restarts\":1,\"respawned\":{\"server 1\":1}}\n");
  BOOST_TEST(kv_err.empty());
  BOOST_TEST(r.coordinator_code == 4);
  BOOST_TEST(r.others_failed == 0);
}

// A training job that lost a worker deals its samples to the others and says so in
// workers_lost: that worker's failure does not fail the launch, a server's does, and so
// does a key-value job's worker (the user's own program).
BOOST_AUTO_TEST_CASE(a_worker_the_job_went_on_without_does_not_fail_the_launch) {
  group_result g;
  g.collected = {"{\"test_accuracy\":0.88,\"workers_lost\":1}"};
  g.children = {{"coordinator", 0, 0, false}, {"worker 1", -1, 15, false}, {"worker 0", 0, 0, false}};
  launch_outcome r;
  const auto [out, err] = captured([&] { r = report_outcome(g, 0, false); });
  BOOST_TEST(r.workers_failed == 1);
  BOOST_TEST(r.workers_lost == 1);
  BOOST_TEST(r.others_ended_well());
  BOOST_TEST(err == "launch: worker 1 failed (signal 15)\nlaunch: the job went on without that worker (workers_lost 1)\n");
  g.children.push_back({"server 0", 1, 0, false});
  const auto [out2, err2] = captured([&] { r = report_outcome(g, 0, false); });
  BOOST_TEST(!r.others_ended_well());
  g.children = {{"coordinator", 0, 0, false}, {"worker 0", -1, 15, false}, {"worker 1", -1, 15, false}};
  const auto [out3, err3] = captured([&] { r = report_outcome(g, 0, false); });
  BOOST_TEST(!r.others_ended_well());  // two failed, one counted lost
  // A key-value job's worker is the user's program: its death fails the launch.
  g.children = {{"coordinator", 0, 0, false}, {"worker 1", -1, 9, false}};
  const auto [out4, err4] = captured([&] { r = report_outcome(g, 0, true); });
  BOOST_TEST(!r.others_ended_well());
}

BOOST_AUTO_TEST_CASE(a_coordinator_that_had_to_be_stopped_is_named_and_fails_the_launch) {
  group_result g;
  g.children = {{"coordinator", -1, 15, true}};
  launch_outcome r;
  const auto [out, err] = captured([&] { r = report_outcome(g, 0, false); });
  BOOST_TEST(out.empty());  // no JSON line came
  BOOST_TEST(err.find("the coordinator did not end") != std::string::npos);
  BOOST_TEST(r.coordinator_code == exit_failed);
}
