// parallel_ranges: a host loop over [0, n) cut into one contiguous range per compute
// thread (blas_threads(), the --threads setting), run on an OpenMP team. Each element is
// computed by exactly one thread with the same arithmetic as on one, so results do not
// depend on the thread count. The body must not throw: check arguments before.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "tensor/gemm.hpp"

namespace troupe {

// Below about this many elements a loop is not worth a second thread.
inline constexpr std::int64_t parallel_grain = 1 << 15;

// body(lo, hi) for consecutive ranges covering [0, n); ranges of fewer than `grain`
// elements are not split off, so small loops stay on the calling thread.
template <class Body>
void parallel_ranges(std::int64_t n, std::int64_t grain, const Body& body) {
  const int parts = static_cast<int>(std::min<std::int64_t>(blas_threads(), n / std::max<std::int64_t>(grain, 1)));
  if (parts <= 1 || omp_in_parallel()) {
    if (n > 0) body(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(parts)
  {
    const std::int64_t p = omp_get_thread_num(), team = omp_get_num_threads();
    body(n * p / team, n * (p + 1) / team);
  }
}

}  // namespace troupe
