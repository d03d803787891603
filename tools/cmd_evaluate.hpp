// `troupe evaluate`: the test-set score of a saved model (Note [Model files]).
#pragma once

#include "tools/cli_common.hpp"

namespace troupe::cli {

command add_evaluate(CLI::App& parent);

}  // namespace troupe::cli
