// What the roles report to: the process's metric registry and its trace timeline. Either
// may be absent (--metrics off, no --trace); nothing is recorded then.
#pragma once

#include <memory>

#include "monitoring/metrics.hpp"
#include "monitoring/trace.hpp"

namespace troupe {

struct observability {
  std::shared_ptr<monitoring::registry> metrics;
  std::shared_ptr<monitoring::trace_log> trace;
};

}  // namespace troupe
