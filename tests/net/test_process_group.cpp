// Tests for net/process_group.cpp: output streamed per child, the leader's stdout
// collected, exit codes and signals reported, and children outliving the leader stopped.
#define BOOST_TEST_MODULE process_group
#include <boost/test/unit_test.hpp>

#include <chrono>

#include "net/process_group.hpp"

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
