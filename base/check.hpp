// Precondition checks for the numeric core. A failed check is a programmer error
// (wrong shapes or dtypes passed to an op) and throws troupe::contract_error with the
// condition, file and line; it is never used for bad user input, which gets failure values.
#pragma once

#include <stdexcept>
#include <string>

namespace troupe {

struct contract_error : std::logic_error {
  using std::logic_error::logic_error;
};

[[noreturn]] void throw_contract_error(const char* cond, const std::string& what, const char* file,
                                       int line);

}  // namespace troupe

#define TROUPE_CHECK(cond, what)                                          \
  do {                                                                    \
    if (!(cond)) ::troupe::throw_contract_error(#cond, (what), __FILE__, __LINE__); \
  } while (false)
