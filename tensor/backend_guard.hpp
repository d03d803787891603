// The error convention of a backend table (tensor/backend_abi.h), shared by the CPU
// backend and the CUDA module: an entry runs its body through guarded(), which turns
// any exception into status 1 and keeps its message for the calling thread's last_error.
// Header-only, so the module (which links nothing of Troupe's) uses the same code.
#pragma once

#include <exception>
#include <string>

namespace troupe {

// The calling thread's last failure message ("" when none); the table's last_error.
inline std::string& backend_last_error() {
  thread_local std::string message;
  return message;
}

template <class F>
int guarded(F&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    backend_last_error() = e.what();
    return 1;
  }
}

}  // namespace troupe
