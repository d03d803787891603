// stage_inbox: the activations (or activation gradients) a pipeline stage has received
// and not yet used, keyed by (step, microbatch), and the checks each one passes first:
// a step the stage is at (or the next one), a microbatch that step has, an f32 tensor of
// exactly (rows of that microbatch, per-sample shape...), finite values, and no second
// copy. A refused tensor is never filed; the caller turns the error into the stage's
// typed error (the pipeline cannot go on without the right tensor).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "base/errc.hpp"
#include "core/job.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

class stage_inbox {
 public:
  // what: "activation" or "activation gradient"; per_sample: the shape of one row.
  stage_inbox(job_spec job, shape per_sample, std::string what);

  struct refusal {
    errc code;
    std::string detail;
  };
  // Files data for (step, microbatch). clock and step_in_epoch: where the receiver is.
  std::optional<refusal> file(std::int64_t clock, std::int64_t step_in_epoch, std::int64_t step,
                              std::int32_t microbatch, tensor data);
  // Removes and returns the tensor for (step, microbatch), if it is here.
  std::optional<tensor> take(std::int64_t step, std::int32_t microbatch);
  // Whether the tensor for (step, microbatch) is here.
  bool holds(std::int64_t step, std::int32_t microbatch) const { return box_.contains({step, microbatch}); }
  std::size_t size() const { return box_.size(); }

 private:
  job_spec job_;
  shape per_sample_;
  std::string what_;
  std::map<std::pair<std::int64_t, std::int32_t>, tensor> box_;
};

}  // namespace troupe
