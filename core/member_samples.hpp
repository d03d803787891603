// member_samples: a training member's sample accounting (Note [Dealing a lost worker's
// samples] and Note [Balancing shares] in core/sample_deal.hpp): which rows of the
// training set each of its steps trains (its own share of the epoch's order, as many as it
// keeps, then the positions of the whole permutation granted to it), and the rows its
// gradient is scaled by (its own share's, so granted rows add to the sum as the lost
// worker's would have). CAF-free; the member's core (core/member_core.hpp) owns it and asks
// it at each epoch and step; the coordinator's grants and sheds come through it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/job.hpp"
#include "core/sample_deal.hpp"

namespace troupe {

class member_samples {
 public:
  member_samples() = default;
  // For data-parallel replica `replica` of `world` members of `job`.
  member_samples(const job_spec& job, std::uint32_t replica, std::uint32_t world);

  // Epoch `epoch` begins at `clock` over `train_size` samples (0: this stage reads no data,
  // so it plans row counts only); grants whose steps all lie before `clock` are forgotten.
  void begin_epoch(std::int64_t train_size, std::int32_t epoch, std::int64_t clock);

  // The coordinator grants rows (taken if they all fall after `clock`, the step the member
  // is in, and fit: false sends them back), or asks the member to keep `keep` of its own
  // rows per step from clock `from` on.
  bool take_grant(rows_grant g, std::int64_t clock);
  void keep_from(std::int64_t from, std::int64_t keep);

  // Plans step `step_in_epoch` of the epoch, at `clock`: its rows (own kept, then granted),
  // whose training-set indices indices() gives when the epoch had data.
  std::int64_t plan_step(std::int64_t step_in_epoch, std::int64_t clock);
  // Rows [begin, begin + rows) of the planned step's indices.
  std::span<const std::int64_t> indices(std::int64_t begin, std::int64_t rows) const;
  // The planned step's own share of rows, which scales its loss and gradient.
  std::int64_t scale_rows() const { return scale_rows_; }
  // The rows the step at `clock` trains (or trained): for the samples a dropped gradient
  // takes with it.
  std::int64_t rows_at(std::int64_t clock) const;

 private:
  job_spec job_;
  std::uint32_t replica_ = 0, world_ = 1;
  std::int64_t steps_per_epoch_ = 1;
  member_grants grants_;
  kept_rows kept_;
  bool has_data_ = false;
  std::vector<std::int64_t> order_, perm_, step_idx_;  // the epoch's own order and whole permutation
  std::int64_t scale_rows_ = 1;
};

}  // namespace troupe
