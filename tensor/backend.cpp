// --device parsing, the CUDA module loader and backend_context.
#include "tensor/backend.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "tensor/cpu_backend.hpp"

namespace troupe {

// Note [Why the CUDA backend is a module]
// libcublasLt has a 92 KiB static-TLS block; linked into a process, every thread then
// needs more than the 100 KiB stacks civetweb gives its threads, so the Prometheus
// exposer cannot start. Loaded with dlopen, its TLS is dynamic and nothing breaks
// (see docs/DESIGN.md, "Compute"). So nothing links CUDA libraries: the
// module is opened here, on first use, and its table is the only thing the rest sees.

expected<device> parse_device(std::string_view text) {
  if (text == "cpu") return cpu_device;
  if (text == "cuda") return device{device_kind::cuda, 0};
  if (text.substr(0, 5) == "cuda:") {
    int index = -1;
    auto digits = text.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc{} && end == digits.data() + digits.size() && index >= 0 && index < 1024)
      return device{device_kind::cuda, index};
  }
  return failure{"unknown device '" + std::string(text) + "'; use cpu, cuda or cuda:N (N = 0, 1, ...)"};
}

std::string to_string(device d) {
  return d.kind == device_kind::cpu ? "cpu" : "cuda:" + std::to_string(d.index);
}

std::string cuda_module_path() {
  if (const char* env = std::getenv("TROUPE_CUDA_MODULE"); env && *env) return env;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "libtroupe_cuda.so";
  return (exe.parent_path().parent_path() / "lib" / "libtroupe_cuda.so").string();
}

expected<const troupe_backend_v1*> load_backend_module(const std::string& path) {
  if (!std::filesystem::exists(path))
    return failure{"this build has no CUDA backend: " + path +
                   " does not exist (the CUDA toolkit was not found when Troupe was built; rebuild where nvcc is "
                   "installed, with -DTROUPE_WITH_CUDA=ON to make that an error). Use --device cpu"};
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return failure{"could not load the CUDA backend " + path + ": " + dlerror() +
                   " (it needs the CUDA 13 runtime, cuBLAS, cuDNN 9 and NCCL libraries). Use --device cpu"};
  auto entry = reinterpret_cast<troupe_backend_entry_fn>(dlsym(lib, TROUPE_BACKEND_ENTRY));
  if (!entry) return failure{path + " does not export " TROUPE_BACKEND_ENTRY "; it is not a Troupe backend module"};
  const troupe_backend_v1* t = entry();
  if (!t || t->abi_version < TROUPE_BACKEND_ABI_VERSION)
    return failure{path + " implements backend ABI " + std::to_string(t ? t->abi_version : 0) + ", this binary needs " +
                   std::to_string(TROUPE_BACKEND_ABI_VERSION) + "; rebuild both from the same tree"};
  return t;  // the module stays loaded for the life of the process
}

expected<const troupe_backend_v1*> backend_table(device_kind kind) {
  if (kind == device_kind::cpu) return cpu_backend_table();
  static std::once_flag once;
  static expected<const troupe_backend_v1*> cuda = failure{""};
  std::call_once(once, [] { cuda = load_backend_module(cuda_module_path()); });
  return cuda;
}

expected<backend_context> backend_context::open(device d) {
  auto t = backend_table(d.kind);
  if (!t) return t.error();
  const troupe_backend_v1* table = *t;
  int count = 0;
  if (table->device_count(&count) != 0 || count <= 0)
    return failure{std::string(table->last_error()) + ". Use --device cpu"};
  if (d.index >= count)
    return failure{to_string(d) + " was asked for, but this machine has " + std::to_string(count) + " " + table->name +
                   " device" + (count == 1 ? "" : "s") + " (cuda:0 to cuda:" + std::to_string(count - 1) + ")"};
  void* ctx = nullptr;
  if (table->open(d.index, &ctx) != 0)
    return failure{"could not open " + to_string(d) + ": " + table->last_error()};
  return backend_context(table, ctx, d);
}

backend_context::backend_context(backend_context&& o) noexcept
    : table_(std::exchange(o.table_, nullptr)), ctx_(std::exchange(o.ctx_, nullptr)), device_(o.device_) {}

backend_context& backend_context::operator=(backend_context&& o) noexcept {
  if (this != &o) {
    if (table_ && ctx_) table_->close(ctx_);
    table_ = std::exchange(o.table_, nullptr);
    ctx_ = std::exchange(o.ctx_, nullptr);
    device_ = o.device_;
  }
  return *this;
}

backend_context::~backend_context() {
  if (table_ && ctx_) table_->close(ctx_);
}

void backend_context::fail(const char* what) const {
  throw backend_error(to_string(device_) + ": " + what + " failed: " + table_->last_error());
}

troupe_device_info backend_context::info() const {
  troupe_device_info i{};
  call("device_info", &troupe_backend_v1::device_info, &i);
  return i;
}

troupe_memory_stats backend_context::memory() const {
  troupe_memory_stats s{};
  call("memory_stats", &troupe_backend_v1::memory_stats, &s);
  return s;
}

}  // namespace troupe
