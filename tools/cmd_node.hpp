// `troupe node`: one process of a cluster job in one role (coordinator, server, worker).
#pragma once

#include "tools/cli_common.hpp"

namespace troupe::cli {

command add_node(CLI::App& parent);

}  // namespace troupe::cli
