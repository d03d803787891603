// Test helper: a job small enough to check by hand: the model mlp:4-3 (15 parameters) on
// 4 inputs and 3 classes, 100 training samples, 2 epochs, the id "job-under-test". Tests
// change what they need on top.
#pragma once

#include "core/job.hpp"

namespace troupe::test {

inline job_spec tiny_job(sync_mode mode, std::uint32_t workers = 2, std::uint32_t servers = 2) {
  job_spec j;
  j.job_id = "job-under-test";
  j.train.model = "mlp:4-3";
  j.train.epochs = 2;
  j.input_shape = {4};
  j.num_classes = 3;
  j.train_size = 100;
  j.workers = workers;
  j.servers = servers;
  j.mode = mode;
  return j;
}

}  // namespace troupe::test
