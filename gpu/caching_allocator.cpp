// Size classes, free lists and statistics of the caching allocator.
#include "gpu/caching_allocator.hpp"

#include <utility>

namespace troupe::gpu {

namespace {
constexpr std::size_t kib = 1024, mib = 1024 * kib;
}

caching_allocator::caching_allocator(raw_alloc_fn raw_alloc, raw_free_fn raw_free)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

caching_allocator::~caching_allocator() {
  trim();
  for (auto& [p, cls] : live_) raw_free_(p);
}

std::size_t caching_allocator::size_class(std::size_t bytes) {
  if (bytes <= mib) return (bytes + 511) / 512 * 512;
  if (bytes <= 64 * mib) {
    std::size_t c = mib;
    while (c < bytes) c *= 2;
    return c;
  }
  return (bytes + 2 * mib - 1) / (2 * mib) * (2 * mib);
}

void* caching_allocator::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  ++stats_.allocations;
  const std::size_t cls = size_class(bytes);
  void* p = nullptr;
  if (auto it = free_.find(cls); it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= cls;
    ++stats_.cache_hits;
  } else {
    p = raw_alloc_(cls);
    if (!p && stats_.bytes_cached > 0) {
      trim();
      p = raw_alloc_(cls);
    }
    if (!p) return nullptr;
    ++stats_.device_mallocs;
  }
  live_.emplace(p, cls);
  stats_.bytes_in_use += cls;
  return p;
}

bool caching_allocator::release(void* p) {
  auto it = live_.find(p);
  if (it == live_.end()) return false;
  const std::size_t cls = it->second;
  live_.erase(it);
  stats_.bytes_in_use -= cls;
  stats_.bytes_cached += cls;
  free_[cls].push_back(p);
  return true;
}

void caching_allocator::trim() {
  for (auto& [cls, blocks] : free_)
    for (void* p : blocks) raw_free_(p);
  free_.clear();
  stats_.bytes_cached = 0;
}

}  // namespace troupe::gpu
