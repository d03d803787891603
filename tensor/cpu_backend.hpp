// The CPU backend's function table: the host ops of tensor/ behind the backend interface.
#pragma once

#include "tensor/backend_abi.h"

namespace troupe {

const troupe_backend_v1* cpu_backend_table();

}  // namespace troupe
