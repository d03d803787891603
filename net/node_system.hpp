// node_system: a node's actor system, configured from its plan, and its teardown: CAF's
// middleman lets the role's end reach its remote monitors first, and a teardown that hangs
// is watched and left (Note [A node's teardown] in net/node_system.cpp).
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <functional>
#include <optional>

#include "net/node_options.hpp"

namespace troupe {

// What a node's process does when CAF's teardown after the role's end is
// stuck (Note [A node's teardown] in net/node_system.cpp): given the role's end (none: it
// succeeded), it says what the caller would have said and finishes what the caller would
// have finished, and returns the exit code the process then leaves with at once. Unset,
// the node waits for its teardown.
using stuck_teardown_exit = std::function<int(const caf::error& role_end)>;

// A node's actor system, configured from its plan (TLS or plain, heartbeats, the
// protocol) after raising the file-descriptor limit; its teardown is watched (Note [A
// node's teardown]).
class node_system {
 public:
  explicit node_system(const node_plan& plan);
  // Tears the system down (Note [A node's teardown] in net/node_system.cpp).
  ~node_system();
  node_system(const node_system&) = delete;
  node_system& operator=(const node_system&) = delete;

  caf::actor_system& sys() { return *sys_; }
  // The role's actor, whose references a slow teardown names.
  void watch_role(const caf::actor& role) { role_ = caf::actor_cast<caf::weak_actor_ptr>(role); }
  // How the process leaves when the teardown hangs past its limit (unset: it waits).
  void leave_if_stuck(stuck_teardown_exit leave) { leave_ = std::move(leave); }
  // The role's end, for leave_if_stuck; returned.
  caf::error ended(caf::error end) {
    role_end_ = end;
    return end;
  }

 private:
  caf::actor_system_config cfg_;
  std::optional<caf::actor_system> sys_;
  caf::weak_actor_ptr role_;
  stuck_teardown_exit leave_;
  caf::error role_end_;
};

}  // namespace troupe
