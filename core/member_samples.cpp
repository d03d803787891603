// member_samples: the rows each step of a training member trains.
#include "core/member_samples.hpp"

#include <algorithm>

#include "train/sampler.hpp"

namespace troupe {

member_samples::member_samples(const job_spec& job, std::uint32_t replica, std::uint32_t world)
    : job_(job), replica_(replica), world_(world), steps_per_epoch_(std::max<std::int64_t>(1, steps_per_epoch(job))) {
  const deal_shape deal = deal_shape_of(job);
  grants_ = member_grants(steps_per_epoch(job), deal.max_extra_rows, deal.workers * deal.samples_per_worker);
  kept_ = kept_rows(job.train.batch_size);
}

void member_samples::begin_epoch(std::int64_t train_size, std::int32_t epoch, std::int64_t clock) {
  order_.clear();
  perm_.clear();
  has_data_ = train_size > 0;
  if (has_data_) {
    order_ = epoch_indices(train_size, job_.train.seed, epoch, static_cast<int>(replica_), static_cast<int>(world_));
    // Granted rows are positions of the whole permutation.
    if (deals_samples(job_)) perm_ = epoch_permutation(train_size, job_.train.seed, epoch);
  }
  grants_.drop_before(clock);
}

bool member_samples::take_grant(rows_grant g, std::int64_t clock) { return grants_.take(std::move(g), clock); }

void member_samples::keep_from(std::int64_t from, std::int64_t keep) { kept_.set(from, keep); }

std::int64_t member_samples::plan_step(std::int64_t step_in_epoch, std::int64_t clock) {
  scale_rows_ = batch_rows(job_, step_in_epoch);
  const std::int64_t kept = std::min(scale_rows_, kept_.at(clock));
  step_idx_.clear();
  if (has_data_) {
    const auto own = order_.begin() + step_in_epoch * job_.train.batch_size;
    step_idx_.assign(own, own + kept);
    for (std::int64_t p : grants_.rows_at(clock)) step_idx_.push_back(perm_[static_cast<std::size_t>(p)]);
  }
  return kept + grants_.count_at(clock);
}

std::span<const std::int64_t> member_samples::indices(std::int64_t begin, std::int64_t rows) const {
  return std::span<const std::int64_t>(step_idx_).subspan(static_cast<std::size_t>(begin),
                                                          static_cast<std::size_t>(rows));
}

std::int64_t member_samples::rows_at(std::int64_t clock) const {
  return std::min(batch_rows(job_, clock % steps_per_epoch_), kept_.at(clock)) + grants_.count_at(clock);
}

}  // namespace troupe
