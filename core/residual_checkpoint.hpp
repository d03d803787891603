// residual_checkpoint: a member's 2-bit error-feedback residuals as part of a sync job's
// checkpoint (Note [Residuals in checkpoints]): when a job keeps them, the member's file
// and the files a checkpoint's directory holds.
//
// Note [Residuals in checkpoints]
// A member that pushes with --compression 2bit keeps what its pushes have not sent yet
// (Note [2-bit gradients] in tensor/grad_codec.hpp), and its next push adds it in. A
// resumed sync run is bitwise the uninterrupted one only if every member starts from the
// residuals it had, so in sync, at every checkpoint step S (Note [Checkpoint steps] in
// core/shard_core_checkpoints.cpp), each member that pushes writes member-<rank>.tf: a tensor file
// (Note [Tensor files]) of kind "troupe-member-residuals" whose meta says {"identity",
// "rank", "step", "members"} and whose one section, "residual", lays the residuals out as
// the member's stage's flat parameter vector (zero where no shard's range lies), so a job
// resumed on another number of shard servers cuts them by its own key table.
// The member writes it once it has encoded its last push of step S - 1 and before that
// push leaves. A sync shard closes round S - 1 only once every live member's push is in,
// so every live member's file is complete before any shard writes its file of S, and the
// coordinator's commit names each member file it finds in the directory (job.tf lists
// them). A resumed member takes its file when it is there, reads back clean, and was
// written for its rank, the job's number of members and the resumed clock; otherwise it
// starts from zeros and says why: a resume on another number of workers (the samples
// behind the residuals were another partition's), a step named with --checkpoint-seconds
// that reached the member after its push, a checkpoint taken without 2-bit pushes, or a
// member that the round closed without (--backup-workers).
// Async and ssp keep no residuals: their resumed runs repeat steps anyway (Note [Resuming
// a job] in core/job_checkpoint.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "core/job.hpp"
#include "core/shard_checkpoint.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

inline constexpr const char* residuals_kind = "troupe-member-residuals";

// Whether this job's checkpoints hold the members' residuals: sync, 2-bit pushes to
// shard servers, and a checkpoint directory.
bool keeps_residuals(const job_spec& job);

std::string residual_file_name(std::uint32_t rank);  // member-<rank>.tf

struct residual_image {
  std::uint32_t rank = 0;
  std::int64_t step = 0;      // the checkpoint's
  std::uint32_t members = 0;  // the job's members (workers x stages) when it was written
  tensor residual;            // f32, the length of the member's stage's parameter vector
};

// Writes the image durably (Note [Durable replace]); why not.
std::optional<std::string> write_residual_image(const std::filesystem::path& path, const residual_image& r,
                                                const checkpoint_identity& id);
// Reads and checks one member's file against the identity it must carry; why not, naming
// the file.
expected<residual_image> read_residual_image(const std::filesystem::path& path, const checkpoint_identity& id);

// The members' files (member-<rank>.tf, rank < members) in a checkpoint's directory.
std::vector<std::string> residual_files_in(const std::filesystem::path& dir, std::uint32_t members);

}  // namespace troupe
