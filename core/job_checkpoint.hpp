// job_checkpoint: a training job's checkpoints as a whole: what they must agree on, the
// coordinator's job-state file and the commit that completes a checkpoint, and where a
// resumed job starts from (Note [Resuming a job]).
//
// Note [Resuming a job]
// A checkpoint of step S (Note [Checkpoint steps] in core/shard_core_checkpoints.cpp) holds
// every shard's file (Note [Shard checkpoints]), in a sync job with 2-bit pushes the members'
// residuals (member-<rank>.tf), the coordinator's job.tf (kind "troupe-job-state": the
// identity, the step, the job's shape when it was taken: workers, batch size, training
// samples and steps per epoch, the mode, the seed, each shard's version, the member
// files) and last the manifest (Note [Checkpoint directory]).
// Resuming picks the newest checkpoint whose files all pass their checks. The members go
// on from a clock computed from S:
//   - on the same workers, batch size and training set: S itself. In sync the result is
//     bitwise that of the uninterrupted run (every sample order, round and update is the
//     same); in async and ssp the faster workers repeat their steps after S.
//   - otherwise the epoch S was in continues on the new partition: its first
//     (S mod old steps per epoch) x old batch x old workers samples of the epoch's
//     permutation were trained, and the members go on from the new step whose samples
//     begin at or before that point (train/sampler.hpp deals the permutation out in
//     turn), so no sample of the epoch is skipped and fewer than one new round's samples
//     are seen twice.
// The shards restore their slices, resharded when the key table changed. In sync, each
// member restores its 2-bit error-feedback residuals too, when they were kept for its
// rank and clock (Note [Residuals in checkpoints] in core/residual_checkpoint.hpp). What a
// resumed job does not keep: residuals in async and ssp (they start at zero), the
// accounts of the epochs before S (the result counts what the resumed run trained, and
// says where it resumed).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "core/checkpoint_store.hpp"
#include "core/job.hpp"
#include "core/kv_layout.hpp"
#include "core/messages.hpp"
#include "core/shard_checkpoint.hpp"

namespace troupe {

inline constexpr const char* job_state_kind = "troupe-job-state";
inline constexpr const char* job_state_file = "job.tf";

// What every file of this job's checkpoints carries (the job id must be set); a key-value
// job's name this model and no parameters (Note [Key-value checkpoints]).
inline constexpr const char* key_value_model = "key-value";
checkpoint_identity identity_of(const job_spec& job, std::int64_t num_params);

// Completes checkpoint `step` of the job in `store`: job.tf (with a key-value job's keys),
// then the manifest naming it, the shards' files, with their versions, and the members'
// residual files there are. Why not.
std::optional<std::string> commit_job_checkpoint(const checkpoint_store& store, const job_spec& job,
                                                 std::int64_t num_params, std::int64_t step,
                                                 const std::vector<checkpoint_saved>& shards,
                                                 const std::vector<kv_key_layout>& keys = {});

// The job id of the newest complete checkpoint in dir (a resumed job takes it); why none.
expected<std::string> checkpointed_job_id(const std::filesystem::path& dir);

struct resume_point {
  std::int64_t step = 0;       // the checkpoint's
  std::int64_t clock = 0;      // where the members go on
  shard_resume shards;         // what the shards are told
  std::vector<std::string> skipped;  // newer checkpoints passed over, each with why
  // The steps of the lost run this one repeats, when a record says (Note [Steps replayed]
  // in core/loss_record.hpp); the caller fills it in.
  std::optional<std::int64_t> steps_replayed;
  // A key-value job: the keys it goes on with (Note [Key-value checkpoints]).
  std::vector<kv_key_layout> keys;
};

// Whether a checkpoint at the end of the job's epochs may be resumed from: not for
// --resume (nothing is left to train), but for a restart in place after training ended
// (Note [A shard lost after training] in core/job_epochs.cpp).
enum class resume_at_end : std::uint8_t { refused, taken };

// Where `job` (prepared, its id the checkpoint's) resumes from the newest good checkpoint
// in dir. Why not: no good checkpoint, another job's or model's, or one at the job's end
// (unless `at_end` takes it); a key-value job's taken on another number of shard servers.
expected<resume_point> find_resume(const std::filesystem::path& dir, const job_spec& job, std::int64_t num_params,
                                   resume_at_end at_end = resume_at_end::refused);

// The whole model of the newest good checkpoint in dir (`troupe export`): its parameters
// assembled from every shard's file, with what the job's state says of it.
struct checkpointed_model {
  std::int64_t step = 0;
  std::string job_id, model;          // the model spec
  std::vector<std::int64_t> input_shape;
  std::int64_t classes = 0;
  tensor params;                      // the flat vector, in the model's layout
  std::vector<std::string> skipped;   // newer checkpoints passed over, each with why
};
expected<checkpointed_model> read_checkpointed_model(const std::filesystem::path& dir);

// The members' clock that continues checkpoint `step` of a job that had old_workers
// workers of old_batch samples and old_steps_per_epoch steps per epoch (Note [Resuming a
// job]).
std::int64_t resume_clock(const job_spec& job, std::int64_t step, std::int64_t old_workers, std::int64_t old_batch,
                          std::int64_t old_steps_per_epoch);

}  // namespace troupe
