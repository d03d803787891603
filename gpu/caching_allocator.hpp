// A caching allocator over a raw device allocator: blocks are rounded up to a size class
// and, when released, kept on that class's free list for the next request of the same
// class, so a training step's buffers stop reaching cudaMalloc after the first step.
// Knows nothing of CUDA (the raw functions are passed in), so it is tested on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

namespace troupe::gpu {

struct allocator_stats {
  std::uint64_t bytes_in_use = 0, bytes_cached = 0, allocations = 0, cache_hits = 0, device_mallocs = 0;
};

class caching_allocator {
 public:
  // raw_alloc returns nullptr when the device is out of memory; raw_free never fails.
  using raw_alloc_fn = std::function<void*(std::size_t)>;
  using raw_free_fn = std::function<void(void*)>;

  caching_allocator(raw_alloc_fn raw_alloc, raw_free_fn raw_free);
  ~caching_allocator();  // returns every block, cached or not, to the raw allocator
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  // The class of a request: 512-byte multiples up to 1 MiB, powers of two up to 64 MiB,
  // then 2 MiB multiples (so a large block wastes at most 2 MiB).
  static std::size_t size_class(std::size_t bytes);

  // A block of at least `bytes` (nullptr for 0). When the raw allocator is out of memory,
  // the cache is emptied and the request retried once; nullptr then means out of memory.
  void* allocate(std::size_t bytes);
  // Returns a block from allocate() to its free list. False for a pointer it never gave.
  bool release(void* p);
  // Hands every cached block back to the raw allocator.
  void trim();

  const allocator_stats& stats() const { return stats_; }

 private:
  raw_alloc_fn raw_alloc_;
  raw_free_fn raw_free_;
  std::map<std::size_t, std::vector<void*>> free_;     // by size class
  std::unordered_map<void*, std::size_t> live_;        // handed out: its size class
  allocator_stats stats_;
};

}  // namespace troupe::gpu
