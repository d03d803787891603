// member_data: taking and checking the job's dataset, and gathering a microbatch from it.
#include "core/member_data.hpp"

#include "train/sampler.hpp"

namespace troupe {

std::optional<fault> member_data::take(const job_spec& job, const dataset_producer& produce, const std::string& who) {
  auto data = produce(job);
  if (!data) return fault{errc::bad_job, data.error().message};
  if ((*data)->train.size() != job.train_size)
    return fault{errc::bad_job, who + "'s training set has " + std::to_string((*data)->train.size()) +
                                    " samples but the job has " + std::to_string(job.train_size)};
  auto aug = parse_augmentation(job.train.augment);
  if (!aug) return fault{errc::bad_job, aug.error().message};
  if (auto bad = augmentation_unfit(*aug, (*data)->train)) return fault{errc::bad_job, bad->message};
  data_ = std::move(*data);
  augment_ = *aug;
  return std::nullopt;
}

void member_data::allocate(std::int64_t max_rows) {
  inputs_ = tensor(data_->train.sample_shape().prepend(max_rows));
  labels_ = tensor(data_->train.labels.sizes().drop_front().prepend(max_rows), dtype::i32);
}

void member_data::gather(std::span<const std::int64_t> idx, bool augment_images, std::uint64_t seed,
                         std::int64_t epoch) {
  const auto rows = static_cast<std::int64_t>(idx.size());
  gather_batch(inputs(rows), labels(rows), data_->train, idx);
  if (augment_images)
    troupe::augment_images(inputs(rows), augment_, idx, seed, epoch, -data_->pixel_mean / data_->pixel_std);
  // Every stage shifts, so the last stage's labels follow the first stage's tokens.
  shift_windows(inputs(rows), labels(rows), augment_, idx, data_->train, seed, epoch);
}

}  // namespace troupe
