// member_data: what a member's first and last stages read (the others read nothing): the
// job's training set, checked against the job, its augmentation, and one microbatch's
// inputs and labels gathered from it. CAF-free; the member's core (core/member_core.hpp)
// owns it, its sample accounting (core/member_samples.hpp) says which rows to gather.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/expected.hpp"
#include "base/errc.hpp"
#include "core/job.hpp"
#include "tensor/tensor.hpp"
#include "train/augment.hpp"
#include "train/dataset.hpp"

namespace troupe {

// Produces the job's dataset once the job is known (member_setup::data).
using dataset_producer = std::function<expected<std::shared_ptr<const dataset_split>>(const job_spec&)>;

class member_data {
 public:
  // Takes the job's dataset from `produce`. Its training set must have the job's
  // train_size samples and fit the job's --augment; else a bad_job fault that names the
  // member as `who` and says which. Nothing is kept then.
  std::optional<fault> take(const job_spec& job, const dataset_producer& produce, const std::string& who);
  bool taken() const { return data_ != nullptr; }
  // The training set's samples (0 before take()).
  std::int64_t train_size() const { return data_ ? data_->train.size() : 0; }

  // Buffers for microbatches of up to max_rows rows (after take()).
  void allocate(std::int64_t max_rows);
  // Gathers the training samples `idx` (at most max_rows) into the buffers' first rows for
  // epoch `epoch`: images augmented when `augment_images` (the first stage), a text's
  // windows shifted at every stage (Note [Shifted windows] in train/augment.hpp), both
  // drawn from the job's seed.
  void gather(std::span<const std::int64_t> idx, bool augment_images, std::uint64_t seed, std::int64_t epoch);
  // The first `rows` rows of what gather() left.
  tensor_view inputs(std::int64_t rows) { return inputs_.view().slice(0, rows); }
  tensor_view labels(std::int64_t rows) { return labels_.view().slice(0, rows); }

 private:
  std::shared_ptr<const dataset_split> data_;
  augmentation augment_;
  tensor inputs_, labels_;
};

}  // namespace troupe
