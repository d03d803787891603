// Test support: small deal shapes (core/sample_deal.hpp) for the dealer's tests.
#pragma once

#include <cstdint>

#include "core/sample_deal.hpp"

namespace troupe::test {

// 3 ranks of batch 2, 10 samples each (steps of 2, 2, 2, 2, 2 rows), 2 epochs.
inline deal_shape small_shape(std::int64_t workers = 3, std::int64_t batch = 2, std::int64_t per_worker = 10,
                       std::int64_t epochs = 2) {
  deal_shape d;
  d.workers = workers;
  d.batch = batch;
  d.samples_per_worker = per_worker;
  d.steps_per_epoch = (per_worker + batch - 1) / batch;
  d.total_steps = d.steps_per_epoch * epochs;
  d.max_extra_rows = batch;
  return d;
}

}  // namespace troupe::test
