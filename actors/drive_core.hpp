// drive_core: how the coordinator's shell calls job_core: the call returns actions that
// the shell carries out; an exception that escapes the core becomes the core's
// fail(compute_failed), so the job ends with a message instead of reaching CAF; and, at
// the job's end, how the shell answers the processes waiting for it.
#pragma once

#include <spdlog/spdlog.h>

#include <exception>
#include <string>
#include <utility>
#include <variant>

#include "actors/protocol.hpp"
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

// Every run request gets the job's result, or its error (logged); returns the reason the
// job's actors stop with (user_shutdown after a result).
template <class RunPromises>
caf::error answer_runs(RunPromises& runs, const std::variant<job_result, fault>& outcome) {
  caf::error reason = caf::exit_reason::user_shutdown;
  if (const auto* f = std::get_if<fault>(&outcome)) {
    spdlog::error("coordinator: the job failed: {}", to_string(*f));
    reason = make_error(*f);
  }
  for (auto& run : runs) {
    if (const auto* r = std::get_if<job_result>(&outcome))
      run.deliver(*r);
    else
      run.deliver(reason);
  }
  return reason;
}

}  // namespace troupe
