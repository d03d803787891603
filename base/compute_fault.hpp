// Exceptions from compute as typed errors: an op that throws (a device out of memory, a
// backend failure, a broken contract, std::bad_alloc) becomes a compute_failed fault that
// names the op and carries the exception's message. Actors and cores run every call into
// compute through this, so such a failure reaches the job as a Troupe error, never as
// CAF's generic one or a crash.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "base/errc.hpp"

namespace troupe {

// Runs body(); returns the fault if it threw, nullopt otherwise. `op` says what was running
// ("forward of microbatch 2 on stage 1 of replica 0").
template <class F>
std::optional<fault> catch_compute(std::string_view op, F&& body) {
  try {
    body();
    return std::nullopt;
  } catch (const std::exception& e) {
    return fault{errc::compute_failed, std::string(op) + " failed: " + e.what()};
  }
}

}  // namespace troupe
