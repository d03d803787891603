// loss_record: what a job that lost a node leaves beside its checkpoints, so the run that
// resumes it can say how many steps it repeats (Note [Steps replayed]).
//
// Note [Steps replayed]
// A job that keeps checkpoints and stops because it lost a node (a shard server, every
// worker, an allreduce replica or a pipeline stage, or a stall: is_node_loss) writes
// DIR/lost.json before it ends (when DIR exists: before the first checkpoint there is
// nothing to resume): the job id and the furthest step a member had reached.
// The run that resumes from checkpoint S (at most that step) repeats the steps from S to
// there: its result's `steps_replayed` and the coordinator's troupe_steps_replayed gauge
// say how many. The record is consumed when a run resumes (read, then removed), so a
// record there is always the last run's: a run that resumes after a loss nobody recorded
// (the coordinator itself killed) does not know, and says so (null, no gauge). The count
// is the last restart's, not a sum over restarts; `launch` reports the restarts beside
// it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/errc.hpp"
#include "base/expected.hpp"

namespace troupe {

inline constexpr const char* loss_record_file = "lost.json";

struct loss_record {
  std::string job_id;
  std::int64_t reached = 0;  // the furthest step a member had reached
  std::string why;           // the job's error
};

// Whether a job that failed with `code` lost a node (and so may go on from a checkpoint).
bool is_node_loss(errc code);

// Writes dir/lost.json durably; why not.
std::optional<std::string> write_loss_record(const std::filesystem::path& dir, const loss_record& r);

// dir's record: none when there is none; why not, when it cannot be read as one.
expected<std::optional<loss_record>> read_loss_record(const std::filesystem::path& dir);

// Removes dir's record, if any; why not, when it is there and stays.
std::optional<std::string> forget_loss_record(const std::filesystem::path& dir);

// The steps a run of job `job_id` resuming from checkpoint `step` repeats, by the record:
// none when the record is of another job, or of a run that had not reached `step`.
std::optional<std::int64_t> steps_replayed(const loss_record& r, const std::string& job_id, std::int64_t step);

// Consumes dir's record for a run of `job_id` resuming from checkpoint `step`: reads it,
// removes it, and says the steps that run repeats (none when unknown); `warnings` gets
// what went wrong (a damaged record, one that stays), each a sentence for the operator.
struct taken_record {
  std::optional<std::int64_t> steps_replayed;
  std::vector<std::string> warnings;
};
taken_record take_loss_record(const std::filesystem::path& dir, const std::string& job_id, std::int64_t step);

}  // namespace troupe
