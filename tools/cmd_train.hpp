// `troupe train`: the embedded default. Runs the coordinator, S shard servers and N
// workers as actors in this process (no network port) and ends with one JSON line.
#pragma once

#include "tools/cli_common.hpp"

namespace troupe::cli {

command add_train(CLI::App& parent);

}  // namespace troupe::cli
