// Tests for tools/launch_restarts.cpp (Note [Restarting a job]): a node killed from
// outside or a coordinator saying its job lost a node is a lost node, a node launch
// stopped or a job that failed otherwise is not; the next attempt's coordinator resumes
// from the newest complete checkpoint (replacing an earlier --resume), and without one
// starts as before.
#define BOOST_TEST_MODULE launch_restarts
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include "core/checkpoint_store.hpp"
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
