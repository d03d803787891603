// launch_restarts: a lost node, and the next attempt's --resume (Note [Restarting a job]).
#include "tools/launch_restarts.hpp"

#include <algorithm>

#include "core/checkpoint_store.hpp"
#include "tools/cli_common.hpp"

namespace troupe::cli {

bool lost_a_node(const group_result& g) {
  for (const auto& c : g.children)
    if ((c.signal != 0 && !c.stopped) || (c.name == "coordinator" && c.exit_code == exit_node_lost)) return true;
  return false;
}

void resume_next_attempt(std::vector<child_spec>& nodes, const std::string& dir) {
  if (checkpoint_store(dir, 1).complete().empty()) return;
  for (auto& n : nodes) {
    if (n.name != "coordinator") continue;
    auto& a = n.argv;
    if (auto at = std::find(a.begin(), a.end(), "--resume"); at != a.end() && at + 1 != a.end())
      a.erase(at, at + 2);
    a.insert(a.end(), {"--resume", dir});
  }
}

}  // namespace troupe::cli
