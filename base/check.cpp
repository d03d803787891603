// Formats and throws contract_error for TROUPE_CHECK.
#include "base/check.hpp"

namespace troupe {

void throw_contract_error(const char* cond, const std::string& what, const char* file, int line) {
  throw contract_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " [" + cond + "]");
}

}  // namespace troupe
