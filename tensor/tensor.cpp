// tensor: aligned host allocation, deep copy, adoption of foreign buffers.
#include "tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

namespace troupe {

namespace {

// Note [Host buffer cache]
// Parameter, gradient and message tensors of the same few sizes are allocated and freed
// every step. Fresh large allocations come from mmap, and the kernel zero-fills every
// page on first touch (half the time of a 40 MB push/pull went there), so freed buffers
// of at least cache_min_bytes are kept by exact size and handed out again, up to
// cache_max_bytes in all. Each buffer carries its size in a 64-byte header.
constexpr std::size_t cache_min_bytes = std::size_t{1} << 20;
constexpr std::size_t cache_max_bytes = std::size_t{1} << 30;

class buffer_cache {
 public:
  std::byte* take(std::size_t bytes) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = free_.find(bytes);
    if (it == free_.end()) return nullptr;
    std::byte* p = it->second;
    free_.erase(it);
    cached_ -= bytes;
    return p;
  }
  bool give(std::byte* p, std::size_t bytes) {
    std::lock_guard<std::mutex> g(mu_);
    if (cached_ + bytes > cache_max_bytes) return false;
    free_.emplace(bytes, p);
    cached_ += bytes;
    return true;
  }

 private:
  std::mutex mu_;
  std::multimap<std::size_t, std::byte*> free_;
  std::size_t cached_ = 0;
};

buffer_cache& cache() {
  static buffer_cache* c = new buffer_cache;  // never destroyed: tensors may outlive statics
  return *c;
}

constexpr std::size_t header = tensor_alignment;  // keeps the data 64-byte aligned

std::byte* alloc_host(std::size_t nbytes, bool zero) {
  // aligned_alloc wants a size that is a multiple of the alignment; never ask for 0.
  std::size_t rounded = (nbytes + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
  if (rounded == 0) rounded = tensor_alignment;
  std::byte* base = rounded >= cache_min_bytes ? cache().take(rounded) : nullptr;
  if (!base) {
    base = static_cast<std::byte*>(std::aligned_alloc(tensor_alignment, rounded + header));
    if (!base) throw std::bad_alloc();
    std::memcpy(base, &rounded, sizeof rounded);
  }
  std::byte* p = base + header;
  if (zero) std::memset(p, 0, rounded);
  return p;
}

}  // namespace

void tensor::free_host(void*, std::byte* p) {
  if (!p) return;
  std::byte* base = p - header;
  std::size_t rounded = 0;
  std::memcpy(&rounded, base, sizeof rounded);
  if (rounded >= cache_min_bytes && cache().give(base, rounded)) return;
  std::free(base);
}

tensor::tensor(troupe::shape s, dtype t)
    : tensor_layout(t, s, cpu_device),
      data_(alloc_host(static_cast<std::size_t>(s.numel()) * size_of(t), true), buffer_release{&free_host, nullptr}) {}

tensor tensor::uninitialized(troupe::shape s, dtype t) {
  tensor out;
  out.data_ = std::unique_ptr<std::byte, buffer_release>(
      alloc_host(static_cast<std::size_t>(s.numel()) * size_of(t), false), buffer_release{&free_host, nullptr});
  out.type_ = t;
  out.shape_ = s;
  return out;
}

tensor tensor::adopt(std::byte* data, deleter del, troupe::shape s, dtype t, device d) {
  buffer_release r{[](void* fn, std::byte* p) { reinterpret_cast<deleter>(fn)(p); }, reinterpret_cast<void*>(del)};
  return adopt(data, r, s, t, d);
}

tensor tensor::adopt(std::byte* data, buffer_release release, troupe::shape s, dtype t, device d) {
  tensor out;
  out.data_ = std::unique_ptr<std::byte, buffer_release>(data, release);
  out.type_ = t;
  out.shape_ = s;
  out.device_ = d;
  return out;
}

tensor::tensor(const tensor& other) : tensor_layout(other) {
  if (other.empty()) return;
  TROUPE_CHECK(other.device_.kind == device_kind::cpu, "copy device tensors through their backend");
  data_ = std::unique_ptr<std::byte, buffer_release>(alloc_host(other.nbytes(), false),
                                                     buffer_release{&free_host, nullptr});
  std::memcpy(data_.get(), other.data_.get(), other.nbytes());
}

tensor& tensor::operator=(const tensor& other) {
  if (this != &other) *this = tensor(other);
  return *this;
}

void tensor::reshape(troupe::shape s) {
  TROUPE_CHECK(s.numel() == shape_.numel(), "reshape " + shape_.str() + " -> " + s.str() + " changes numel");
  shape_ = s;
}

void tensor::fill_zero() {
  TROUPE_CHECK(device_.kind == device_kind::cpu, "fill_zero on a device tensor");
  if (data_) std::memset(data_.get(), 0, nbytes());
}

void copy(tensor_view dst, const_tensor_view src) {
  TROUPE_CHECK(dst.type() == src.type() && dst.numel() == src.numel(), "copy: dtype or numel mismatch");
  TROUPE_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy: views must be contiguous");
  TROUPE_CHECK(src.nbytes() == 0 || (!dst.empty() && !src.empty()), "copy: a view without memory");
  TROUPE_CHECK(dst.where().kind == device_kind::cpu && src.where().kind == device_kind::cpu,
               "copy: host views only");
  if (src.nbytes()) std::memmove(dst.bytes(), src.bytes(), src.nbytes());
}

}  // namespace troupe
