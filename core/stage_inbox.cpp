// stage_inbox: checking and filing early activations.
#include "core/stage_inbox.hpp"

#include "tensor/ops.hpp"

namespace troupe {

stage_inbox::stage_inbox(job_spec job, shape per_sample, std::string what)
    : job_(std::move(job)), per_sample_(per_sample), what_(std::move(what)) {}

std::optional<stage_inbox::refusal> stage_inbox::file(std::int64_t clock, std::int64_t step_in_epoch,
                                                      std::int64_t step, std::int32_t microbatch, tensor data) {
  const std::string which = what_ + " for microbatch " + std::to_string(microbatch) + " of step " + std::to_string(step);
  // A neighbour sends for step t only once the receiver has finished every action of the
  // steps before t; one step of slack keeps a reordering transport from failing the job.
  if (step < clock || step > clock + 1)
    return refusal{errc::bad_clock, "an " + which + " reached a stage at step " + std::to_string(clock)};
  const std::int64_t steps = steps_per_epoch(job_);
  const std::int64_t in_epoch = (step_in_epoch + (step - clock)) % steps;
  const std::int64_t batch = batch_rows(job_, in_epoch);
  const int parts = microbatches_for(job_, batch);
  if (microbatch < 0 || microbatch >= parts)
    return refusal{errc::bad_shape, "an " + which + ", but that step has " + std::to_string(parts) + " microbatches"};
  const shape want = per_sample_.prepend(microbatch_rows(batch, parts, microbatch));
  if (data.empty() || data.type() != dtype::f32 || data.sizes() != want)
    return refusal{errc::bad_shape, "an " + which + " of " +
                                        (data.empty() ? std::string("no tensor")
                                                      : std::string(name_of(data.type())) + data.sizes().str()) +
                                        ", expected f32" + want.str()};
  if (!all_finite(data))
    return refusal{errc::diverged, "an " + which +
                                       " holds NaN or infinity: the parameters diverged; lower --lr or lengthen "
                                       "--warmup-epochs"};
  if (!box_.emplace(std::make_pair(step, microbatch), std::move(data)).second)
    return refusal{errc::duplicate, "a second " + which};
  return std::nullopt;
}

std::optional<tensor> stage_inbox::take(std::int64_t step, std::int32_t microbatch) {
  auto it = box_.find({step, microbatch});
  if (it == box_.end()) return std::nullopt;
  tensor t = std::move(it->second);
  box_.erase(it);
  return t;
}

}  // namespace troupe
