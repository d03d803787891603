// `troupe export CHECKPOINT_DIR FILE`: the model of a job's newest good checkpoint as a
// model file (Note [Model files]), for `troupe evaluate`, `train-local --init-from` or
// another framework (.npz).
#pragma once

#include "tools/cli_common.hpp"

namespace troupe::cli {

command add_export(CLI::App& parent);

}  // namespace troupe::cli
