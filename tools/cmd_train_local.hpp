// `troupe train-local`: trains in one process without actors; the local reference the
// distributed modes are compared with.
#pragma once

#include "tools/cli_common.hpp"

namespace troupe::cli {

command add_train_local(CLI::App& parent);

}  // namespace troupe::cli
