// Troupe's error codes: every typed error an actor returns or a node reports, and
// `fault`, a code with its human-readable detail, which CAF-free code (the cores) returns
// where an actor would return a caf::error. actors/protocol.hpp registers the codes with
// CAF as the "troupe" error category and converts a fault into a caf::error.
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
  diverged,          // the training loss stopped being finite, or replicas that must agree did not
  bad_job,           // an invalid job spec
  malformed,         // a payload that does not decode (bad header, byte order, size)
  stage_lost,        // a pipeline stage died: its pipeline cannot finish the step
  compute_failed,    // an op threw (out of device memory, a backend failure, a broken contract)
  no_such_key,       // a key-value job: a key that was never initialised
  timed_out,         // a request got no answer within its timeout
  closed,            // a call on a key-value store after close()
  checkpoint_failed, // a checkpoint could not be written or read (--checkpoint-dir, --resume)
  member_lost,       // a collective's member left or died before it gave its piece
  restarting,        // the job restarts in place from its newest checkpoint: rejoin it (actors/coordinator_restart.cpp)
};
inline constexpr errc last_errc = errc::restarting;

// "bad_shape"; "unknown(N)" for a value that is not a code.
std::string to_string(errc x);

// A typed error as a value: what went wrong (code) and, for a human, the detail.
struct fault {
  errc code = errc::bad_job;
  std::string detail;
};

// "bad_shape: <detail>" (just the code's name when the detail is empty).
std::string to_string(const fault& f);

}  // namespace troupe
