// Tests for gpu/caching_allocator.cpp on the CPU (the raw allocator is malloc here):
// size classes, reuse from the free lists, statistics, trimming, unknown pointers, and
// the retry after emptying the cache when the raw allocator runs out.
#define BOOST_TEST_MODULE caching_allocator
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <map>
#include <set>

#include "gpu/caching_allocator.hpp"

using troupe::gpu::caching_allocator;

namespace {

// malloc with a byte budget, recording what is live, so leaks and double frees show.
struct fake_device {
  explicit fake_device(std::size_t b) : budget(b) {}
  std::size_t budget, used = 0;
  std::set<void*> live;
  std::map<void*, std::size_t> sizes;
  caching_allocator make() {
    return caching_allocator(
        [this](std::size_t bytes) -> void* {
          if (used + bytes > budget) return nullptr;
          void* p = std::malloc(bytes);
          used += bytes;
          live.insert(p);
          sizes[p] = bytes;
          return p;
        },
        [this](void* p) {
          BOOST_REQUIRE(live.erase(p) == 1);
          used -= sizes[p];
          std::free(p);
        });
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(size_classes_round_up_and_bound_the_waste) {
  BOOST_TEST(caching_allocator::size_class(1) == 512u);
  BOOST_TEST(caching_allocator::size_class(512) == 512u);
  BOOST_TEST(caching_allocator::size_class(513) == 1024u);
  BOOST_TEST(caching_allocator::size_class(1 << 20) == std::size_t{1} << 20);
  BOOST_TEST(caching_allocator::size_class((1 << 20) + 1) == std::size_t{2} << 20);
  BOOST_TEST(caching_allocator::size_class(40u << 20) == std::size_t{64} << 20);
  BOOST_TEST(caching_allocator::size_class((100u << 20) + 1) == std::size_t{102} << 20);
  for (std::size_t b : {1ul, 700ul, 5000ul, 3ul << 20, 77ul << 20, 300ul << 20}) {
    BOOST_TEST(caching_allocator::size_class(b) >= b);
    BOOST_TEST(caching_allocator::size_class(b) - b < std::max<std::size_t>(b, 2u << 20));
  }
}

BOOST_AUTO_TEST_CASE(a_released_block_serves_the_next_request_of_its_class) {
  fake_device dev{1 << 30};
  {
    auto a = dev.make();
    void* p = a.allocate(1000);
    BOOST_REQUIRE(p);
    BOOST_TEST(a.stats().bytes_in_use == 1024u);
    BOOST_TEST(a.release(p));
    BOOST_TEST(a.stats().bytes_in_use == 0u);
    BOOST_TEST(a.stats().bytes_cached == 1024u);
    void* q = a.allocate(900);  // same class
    BOOST_TEST(q == p);
    BOOST_TEST(a.stats().cache_hits == 1u);
    BOOST_TEST(a.stats().device_mallocs == 1u);
    void* r = a.allocate(5000);  // another class: a new block
    BOOST_TEST(r != p);
    BOOST_TEST(a.stats().device_mallocs == 2u);
    BOOST_TEST(a.stats().allocations == 3u);
    BOOST_TEST(!a.release(reinterpret_cast<void*>(0x1234)));  // never handed out
    BOOST_TEST(a.allocate(0) == nullptr);
    a.release(q);
    a.trim();
    BOOST_TEST(a.stats().bytes_cached == 0u);
    BOOST_TEST(dev.live.size() == 1u);  // r is still live
  }
  BOOST_TEST(dev.live.empty());  // the destructor returned everything
}

BOOST_AUTO_TEST_CASE(out_of_memory_empties_the_cache_and_retries_once) {
  fake_device dev{3 * 1024};
  auto a = dev.make();
  void* small1 = a.allocate(1024);
  void* small2 = a.allocate(1024);
  a.release(small1);
  a.release(small2);
  BOOST_TEST(a.stats().bytes_cached == 2048u);
  void* big = a.allocate(2048);  // fits only once the cache is handed back
  BOOST_TEST(big != nullptr);
  BOOST_TEST(a.stats().bytes_cached == 0u);
  BOOST_TEST(a.allocate(4096) == nullptr);  // more than the device has: a clean failure
  BOOST_TEST(a.stats().bytes_in_use == 2048u);
}
