// layer_profile: how long each layer of a model takes to run forward and backward,
// measured on a compute. What `--balance time` cuts a pipeline by (core/pipeline_layout).
#pragma once

#include <cstdint>
#include <vector>

#include "base/expected.hpp"
#include "tensor/compute.hpp"
#include "train/model.hpp"

namespace troupe {

struct layer_timing {
  double forward_s = 0.0, backward_s = 0.0;  // one call on the profiled rows
  double total_s() const { return forward_s + backward_s; }
};

struct profile_options {
  std::int64_t rows = 32;  // rows a call runs on: what one microbatch of the job holds
  int passes = 5;          // timed passes after one untimed one; each layer keeps its median
  std::uint64_t seed = 1;  // the random input (token ids below the vocabulary for a model that
                           // starts with an embedding), parameters and output gradient
};

// Times every layer of m on `c`: forward of layer i on the output of layer i - 1, then
// backward from a random output gradient down to layer 0, each call timed alone (the
// compute is synchronised around it). Backward computes the input gradient wherever a
// pipeline stage starting at that layer would have to (every layer after the first with
// parameters). Fails on rows < 1 or passes < 1.
expected<std::vector<layer_timing>> profile_layers(const model& m, const profile_options& o,
                                                   const compute& c = host_compute());

}  // namespace troupe
