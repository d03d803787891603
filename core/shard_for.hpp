// shard_for: the shard core a shard server's welcome describes, for either kind of job.
#pragma once

#include <memory>

#include "base/expected.hpp"
#include "core/messages.hpp"
#include "core/shard_core.hpp"

namespace troupe {

// A training job's shard: its ranges of the model initialised from the job's seed (exactly
// as a local run would), the job's mode, optimizer and schedule, and each pipeline stage's
// slice; and the job's largest message (core/job_frames.hpp), which the shell makes the
// process's frame bound. Fails when the job's model cannot be built.
struct built_shard {
  std::unique_ptr<shard_core> core;
  std::uint64_t frame_bytes = 0;
};
expected<built_shard> shard_for(const shard_welcome& w);
// A key-value job's shard: the job's mode and rules, no parts and no optimizer until the
// coordinator defines keys and a member sets one.
shard_config kv_shard_config(const shard_welcome& w);

}  // namespace troupe
