// member_setup: what a member of a job (core/member_core.hpp) needs besides its welcome:
// where and how it computes, its data, its observability, and its links to the shards and
// to the next replica of its ring, which its shell wires and sends through.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "base/expected.hpp"
#include "core/job.hpp"
#include "core/member_data.hpp"
#include "core/member_device.hpp"
#include "core/ring_link.hpp"
#include "monitoring/observability.hpp"
#include "tensor/tensor.hpp"
#include "train/dataset.hpp"
#include "transport/shard_links.hpp"

namespace troupe {

// What a member needs besides its welcome.
struct member_setup {
  // Produces the job's dataset once the job is known (in one process: the shared copy;
  // on a worker node: loaded from the job's dataset and data_dir). Its training set must
  // have the job's train_size samples. Only stages that read data call it (the first and
  // the last).
  dataset_producer data;
  compute_options compute;
  observability obs;
  // Its links to the job's shards (transport/shard_links.hpp), which its shell wires once
  // it knows them and routes its calls through: where the gradient for a shard is packed
  // (a buffer in a push slot of the same-host fast path, Note [Same-host fast path]; else
  // a fresh tensor), and whether a shard's slice is pulled whole and pushed whole after
  // backward rather than in one piece per gradient bucket (Note [Gradient buckets] in
  // core/gradient_buckets.hpp). Null: fresh tensors, and pieces to every shard when the
  // job has buckets.
  std::shared_ptr<shard_links> links;
  // --mode allreduce: its link to the next replica of its ring (core/ring_link.hpp), which
  // its shell fills and passes pieces through: where an outgoing ring piece is computed
  // (a buffer in the ring mailbox to the next replica, Note [Ring mailboxes]). Null:
  // fresh tensors.
  std::shared_ptr<ring_link> ring;
};

}  // namespace troupe
