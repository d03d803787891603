// Compute backends: parsing `--device cpu|cuda|cuda:N`, loading the CUDA module
// (libtroupe_cuda.so, with dlopen: see Note [Why the CUDA backend is a module] in
// backend.cpp), and backend_context, an open device whose calls throw backend_error
// with the backend's own "file:line: what: status" message when they fail.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "tensor/backend_abi.h"
#include "tensor/dtype.hpp"

namespace troupe {

struct backend_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "cpu", "cuda" (device 0) or "cuda:N".
expected<device> parse_device(std::string_view text);
std::string to_string(device d);

// Where the CUDA module is looked for: $TROUPE_CUDA_MODULE, else lib/libtroupe_cuda.so
// next to the running binary's bin/ directory (the build tree and install layout).
std::string cuda_module_path();

// Opens a backend module at `path` and returns its table (not cached: backend_table
// below loads the CUDA module once). A failure says why: missing, not loadable, not a
// Troupe module, or built for another ABI.
expected<const troupe_backend_v1*> load_backend_module(const std::string& path);

// The function table of a backend kind: the CPU table, or the CUDA module's, loaded once
// per process. A failure says why (module not built, not loadable, wrong ABI).
expected<const troupe_backend_v1*> backend_table(device_kind kind);

class backend_context {
 public:
  // Opens device `d`: checks the driver and that the device exists first, and says which
  // of those is missing when it fails.
  static expected<backend_context> open(device d);

  backend_context(backend_context&& o) noexcept;
  backend_context& operator=(backend_context&& o) noexcept;
  backend_context(const backend_context&) = delete;
  backend_context& operator=(const backend_context&) = delete;
  ~backend_context();

  const troupe_backend_v1& table() const { return *table_; }
  void* handle() const { return ctx_; }
  device where() const { return device_; }
  std::string_view name() const { return table_->name; }

  // Calls a table entry that takes the context first; throws backend_error on failure.
  template <class... Fn, class... Args>
  void call(const char* what, int (*troupe_backend_v1::*entry)(void*, Fn...), Args&&... args) const {
    auto fn = table_->*entry;
    if (!fn) throw backend_error(std::string(table_->name) + " backend has no " + what);
    if (fn(ctx_, static_cast<Fn>(args)...) != 0) fail(what);
  }

  troupe_device_info info() const;
  troupe_memory_stats memory() const;

 private:
  backend_context(const troupe_backend_v1* t, void* ctx, device d) : table_(t), ctx_(ctx), device_(d) {}
  [[noreturn]] void fail(const char* what) const;

  const troupe_backend_v1* table_ = nullptr;
  void* ctx_ = nullptr;
  device device_{};
};

}  // namespace troupe
