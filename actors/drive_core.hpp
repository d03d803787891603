// drive_core: how a coordinator's shell calls its core (job_core, kv_job_core): the call
// returns actions that the shell carries out; an exception that escapes the core becomes
// the core's fail(compute_failed), so the job ends with a message instead of reaching CAF.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "base/errc.hpp"

namespace troupe {

template <class Core, class Call, class CarryOut>
void drive_core(Core& core, Call&& call, CarryOut&& carry_out) {
  decltype(call(core)) actions;
  try {
    actions = call(core);
  } catch (const std::exception& e) {
    actions = core.fail({errc::compute_failed, std::string("coordinator: ") + e.what()});
  }
  carry_out(std::move(actions));
}

}  // namespace troupe
