// Troupe's error codes: every typed error an actor returns or a node reports. Registered
// with CAF as the "troupe" error category (actors/protocol.hpp); this header is plain C++
// so logic that knows nothing of CAF (shard_core, key tables) can use it.
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

enum class errc : std::uint8_t {
  bad_shard = 1,     // a message for another shard, or a layout this shard does not hold
  bad_shape,         // a tensor whose size or shape does not match the key-range table
  bad_dtype,         // a tensor of a dtype the job does not use
  not_finite,        // NaN or infinite values
  not_member,        // the sender is not a live worker of this job
  bad_clock,         // a clock that is out of order for this worker
  stale_round,       // sync: a gradient for a round that is already closed
  duplicate,         // a second gradient for the same round or clock
  not_started,       // the shard has no membership yet
  cluster_full,      // more workers or servers asked to join than the job has
  shard_lost,        // a shard server died: the job cannot go on
  all_workers_lost,  // every worker died
  stalled,           // no progress within the stall timeout
  diverged,          // the training loss stopped being finite
  bad_job,           // an invalid job spec
  malformed,         // a payload that does not decode (bad header, byte order, size)
  stage_lost,        // a pipeline stage died: its pipeline cannot finish the step
};

std::string to_string(errc x);

}  // namespace troupe
