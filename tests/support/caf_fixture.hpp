// CAF fixtures for tests: a deterministic single-threaded actor system (CAF's test
// scheduler; step messages with sched->run()) and a normal threaded one, both with
// Troupe's protocol types registered.
#pragma once

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <memory>
#include <vector>

#include "actors/protocol.hpp"

namespace troupe::test {

struct deterministic_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;

  deterministic_system() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.verbosity", caf::atom("quiet"));
    add_protocol_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
  }
  // Actors a test spawned; they are told to exit before the system shuts down (the
  // system's destructor waits for every actor that is still running).
  std::vector<caf::actor> owned;
  template <class Handle>
  Handle own(Handle h) {
    owned.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

  ~deterministic_system() {
    for (auto& a : owned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched->run();
  }
};

struct threaded_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  threaded_system() {
    cfg.set("scheduler.max-threads", 2);
    add_protocol_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

}  // namespace troupe::test
