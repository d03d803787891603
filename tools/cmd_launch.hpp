// `troupe launch`: a whole job as separate `troupe node` processes, on this machine
// (--local) or over ssh (--hostfile), with TLS by default.
#pragma once

#include "tools/cli_common.hpp"

namespace troupe::cli {

command add_launch(CLI::App& parent);

}  // namespace troupe::cli
