// Test helpers for the shard_core tests: a shard of 8 parameters at plain SGD (lr 1, no
// momentum, so an update subtracts the gradient) with members 0, 1 and 2, and gradients
// to push to it.
#pragma once

#include <array>
#include <cstdint>

#include "core/shard_core.hpp"
#include "tests/support/numeric.hpp"

namespace troupe::test {

inline constexpr std::int64_t plain_numel = 8;

inline shard_core plain_shard(sync_mode mode, std::int32_t staleness = 0, bool staleness_lr = false) {
  shard_config cfg;
  cfg.mode = mode;
  cfg.staleness = staleness;
  cfg.staleness_lr = staleness_lr;
  cfg.optimizer = optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f};
  cfg.schedule = lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f};
  shard_core core(cfg, tensor({plain_numel}));
  core.start({0, 1, 2});
  return core;
}

// Three gradients whose float sum depends on the order: (a + b) + c != a + (b + c).
inline std::array<tensor, 3> order_sensitive() {
  return {random_tensor({plain_numel}, 1, 1e8f), random_tensor({plain_numel}, 2),
          random_tensor({plain_numel}, 3, 1e-7f)};
}

// A gradient of v everywhere.
inline tensor filled(float v) { return filled(plain_numel, v); }

}  // namespace troupe::test
