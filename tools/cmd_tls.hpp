// `troupe tls init`: a private CA and node certificates for a job started by hand, by
// Slurm or by Kubernetes (`troupe launch` makes its own).
#pragma once

#include "tools/cli_common.hpp"

namespace troupe::cli {

command add_tls(CLI::App& parent);

}  // namespace troupe::cli
