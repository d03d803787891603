// Tests for tools/process_group.cpp: output streamed per child, the leader's stdout
// collected, exit codes and signals reported, a program that cannot start reported,
// children outliving the leader stopped, a lost child started again, children dying with a
// killed launcher, and a held stdin that ends with the launcher.
#define BOOST_TEST_MODULE process_group
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tools/process_group.hpp"

using namespace troupe;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(collects_the_leaders_stdout_and_exit_codes) {
  auto g = run_process_group({{"leader", {"sh", "-c", "echo one; echo '{\"x\":1}'; exit 0"}, true, {}},
                              {"other", {"sh", "-c", "echo to stderr >&2; exit 3"}, false, {}}},
                             "leader", 5s);
  BOOST_REQUIRE(g.children.size() == 2u);
  BOOST_TEST(g.children[0].exit_code == 0);
  BOOST_TEST(g.children[1].exit_code == 3);
  BOOST_TEST(g.collected == (std::vector<std::string>{"one", "{\"x\":1}"}));
  BOOST_TEST(!g.interrupted);
}

BOOST_AUTO_TEST_CASE(children_outliving_the_leader_are_stopped) {
  const auto t0 = std::chrono::steady_clock::now();
  auto g = run_process_group({{"leader", {"sh", "-c", "exit 0"}, false, {}}, {"sleeper", {"sleep", "60"}, false, {}}}, "leader",
                             200ms);
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 10s));
  BOOST_REQUIRE(g.children.size() == 2u);
  BOOST_TEST(g.children[1].signal != 0);
}

BOOST_AUTO_TEST_CASE(a_missing_program_is_reported) {
  BOOST_TEST(run_step("step", {"/nonexistent/program"}) == 127);
  BOOST_TEST(run_step("step", {"true"}) == 0);
}

BOOST_AUTO_TEST_CASE(a_missing_program_in_a_group_is_reported_and_the_others_run) {
  auto g = run_process_group({{"leader", {"sh", "-c", "exit 0"}, false, {}},
                              {"missing", {"/nonexistent/program"}, false, {}}},
                             "leader", 1s);
  BOOST_REQUIRE(g.children.size() == 2u);
  BOOST_TEST(g.children[0].exit_code == 0);
  BOOST_TEST(g.children[1].exit_code == 127);
}

// Note [Restarting in place]: a child lost to a signal nobody in the group sent is started
// again, with the same command, up to its respawns; one that exits with an error of its
// own is not, nor one past its respawns.
BOOST_AUTO_TEST_CASE(a_lost_child_is_started_again_up_to_its_respawns) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe-respawn-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string runs = (dir / "runs").string(), done = (dir / "done").string();
  // Killed by SIGKILL on its first two runs; the third ends well and lets the leader end.
  const std::string flaky = "echo run >> " + runs + "; [ $(wc -l < " + runs + ") -ge 3 ] && touch " + done +
                            " && exit 0; kill -9 $$";
  const std::string leader = "i=0; while [ ! -f " + done + " ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done";
  child_spec flaky_child{"flaky", {"sh", "-c", flaky}, false, {}};
  flaky_child.respawns = 3;
  child_spec failing{"failing", {"sh", "-c", "exit 1"}, false, {}};
  failing.respawns = 3;
  child_spec doomed{"doomed", {"sh", "-c", "kill -9 $$"}, false, {}};
  doomed.respawns = 1;
  auto g = run_process_group({{"leader", {"sh", "-c", leader}, false, {}}, flaky_child, failing, doomed}, "leader", 5s);
  std::filesystem::remove_all(dir);
  BOOST_REQUIRE(g.children.size() == 4u);
  BOOST_TEST(g.children[0].exit_code == 0);
  BOOST_TEST(g.children[1].respawned == 2);
  BOOST_TEST(g.children[1].exit_code == 0);
  BOOST_TEST(g.children[2].respawned == 0);
  BOOST_TEST(g.children[2].exit_code == 1);
  BOOST_TEST(g.children[3].respawned == 1);
  BOOST_TEST(g.children[3].signal == SIGKILL);
}

// A leader lost to a signal and started again has not ended the job: the others go on
// with it, and its command may change first (launch adds --resume).
BOOST_AUTO_TEST_CASE(a_lost_leader_started_again_keeps_the_group_running) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe-leader-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string done = (dir / "done").string();
  child_spec leader{"leader", {"sh", "-c", "kill -9 $$"}, true, {}};
  leader.respawns = 1;
  leader.before_respawn = [&](child_spec& c) { c.argv = {"sh", "-c", "echo again; touch " + done}; };
  const std::string waiter = "i=0; while [ ! -f " + done + " ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
                             "[ -f " + done + " ]";
  auto g = run_process_group({leader, {"other", {"sh", "-c", waiter}, false, {}}}, "leader", 5s);
  std::filesystem::remove_all(dir);
  BOOST_REQUIRE(g.children.size() == 2u);
  BOOST_TEST(g.children[0].respawned == 1);
  BOOST_TEST(g.children[0].exit_code == 0);
  BOOST_TEST(g.collected == std::vector<std::string>{"again"}, boost::test_tools::per_element());
  BOOST_TEST(g.children[1].exit_code == 0);  // not stopped: it saw the second run's file
  BOOST_TEST(!g.children[1].stopped);
}

// A launcher killed with SIGKILL cannot pass anything on; its children go with it
// (PR_SET_PDEATHSIG), so no node of its job keeps running.
BOOST_AUTO_TEST_CASE(children_die_with_a_killed_launcher) {
  char dir_template[] = "/tmp/troupe-pg-XXXXXX";
  BOOST_REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string pid_file = std::string(dir_template) + "/child.pid";
  const pid_t launcher = ::fork();
  if (launcher == 0) {  // the launcher: runs a group whose child sleeps, writing its pid first
    run_process_group({{"sleeper", {"sh", "-c", "echo $$ > " + pid_file + "; exec sleep 60"}, false, {}}}, "sleeper",
                      1s);
    ::_exit(0);
  }
  pid_t child = 0;
  for (int i = 0; i < 100 && child == 0; ++i) {
    std::this_thread::sleep_for(50ms);
    std::ifstream(pid_file) >> child;
  }
  BOOST_REQUIRE(child > 0);
  BOOST_TEST(::kill(child, 0) == 0);  // running
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {  // at most 5 s; it is reaped by init once it exits
    std::this_thread::sleep_for(50ms);
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid, name, state;
    gone = !(stat >> pid >> name >> state) || state == "Z";
  }
  BOOST_TEST(gone);
  if (!gone) ::kill(child, SIGKILL);
  std::filesystem::remove_all(dir_template);
}

// hold_stdin: the child's stdin is a pipe only the launcher holds, so it stays open while
// the launcher lives and ends when the launcher is killed; a grandchild that outlives the
// child (as a remote node outlives its ssh client) sees the end.
BOOST_AUTO_TEST_CASE(a_held_stdin_ends_when_the_launcher_dies) {
  char dir_template[] = "/tmp/troupe-pg-XXXXXX";
  BOOST_REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    child_spec watcher{"watcher",
                       {"sh", "-c",
                        // a background list reads /dev/null unless told otherwise: hand it stdin as fd 3
                        "exec 3<&0; (cat <&3 >/dev/null; echo eof > " + dir + "/eof) & echo started > " + dir +
                            "/started; wait"},
                       false,
                       {},
                       true};
    run_process_group({watcher}, "watcher", 1s);
    ::_exit(0);
  }
  bool started = false;
  for (int i = 0; i < 100 && !started; ++i) {
    std::this_thread::sleep_for(50ms);
    started = std::filesystem::exists(dir + "/started");
  }
  BOOST_REQUIRE(started);
  std::this_thread::sleep_for(500ms);
  BOOST_TEST(!std::filesystem::exists(dir + "/eof"));  // open while the launcher lives
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {
    std::this_thread::sleep_for(50ms);
    ended = std::filesystem::exists(dir + "/eof");
  }
  BOOST_TEST(ended);
  std::filesystem::remove_all(dir);
}
