// heap_returner: malloc_trim at most once per interval (Note [Returning the heap] in
// heap_returner.hpp).
#include "client/heap_returner.hpp"

#include <malloc.h>

namespace troupe::kv {

bool heap_returner::maybe_trim() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  auto last = last_.load(std::memory_order_relaxed);
  if ((last != never && now - last < every_) || !last_.compare_exchange_strong(last, now)) return false;
  malloc_trim(0);
  return true;
}

}  // namespace troupe::kv
