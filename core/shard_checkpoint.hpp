// shard_checkpoint: one shard server's part of a checkpoint (its slice of the parameters,
// the optimizer's state for it, its version and Adam's step counts) as a tensor file, and
// the state a shard of another key table starts from when a job resumes on a different
// number of shard servers.
//
// Note [Shard checkpoints]
// A shard writes shard-<index>.tf into the checkpoint's directory (Note [Checkpoint
// directory]): a tensor file (Note [Tensor files]) of kind "troupe-shard-state" whose
// meta says {"identity": the job's (checkpoint_identity), "shard", "step", "version",
// "ranges": [[offset, length], ...] of the flat parameter vector in buffer order,
// "optimizer_steps", "stage_steps": [[stage, steps], ...]} and whose sections are
// "params", "slot1" and, for Adam, "slot2", each the shard's numel f32 values.
// A file is read back only for the identity it was written under (core/checkpoint_file.hpp).
// Resharding assembles the whole flat vectors from every old shard's ranges, which must
// tile [0, num_params) exactly once, and packs the new shard's ranges out of them; the
// version and the step counts of the result are the largest of the old shards' (equal in
// sync, where every shard has closed the same rounds; in async they only bound Adam's
// bias correction, which has faded long before any checkpoint).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "core/checkpoint_file.hpp"
#include "core/key_table.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

struct shard_image {
  std::uint32_t shard = 0;
  std::int64_t step = 0;     // the checkpoint's
  std::int64_t version = 0;  // the shard's, when it was taken
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;  // (offset, length) of the flat vector, buffer order
  tensor params, slot1, slot2;  // slot2 empty for SGD
  std::int64_t optimizer_steps = 0;
  std::map<std::uint32_t, std::int64_t> stage_steps;  // async/ssp with pipeline stages
};

inline constexpr const char* shard_state_kind = "troupe-shard-state";
std::string shard_file_name(std::uint32_t shard);

// Writes the image durably; why not.
std::optional<std::string> write_shard_image(const std::filesystem::path& path, const shard_image& s,
                                             const checkpoint_identity& id);
// Reads and checks one shard's file against the identity it must carry.
expected<shard_image> read_shard_image(const std::filesystem::path& path, const checkpoint_identity& id);

// The state of a shard that holds `ranges` (buffer order) of a model of num_params
// floats, out of the images of every old shard; why not, when they do not tile the model.
expected<shard_image> reshard(const std::vector<shard_image>& old, const std::vector<key_range>& ranges,
                              std::int64_t num_params);

// The state for `ranges` out of a checkpoint's files in dir (every writer's, by index):
// file `own` as it is when it holds exactly these ranges, else every file read and
// resharded. Why not, naming the file or what does not fit.
expected<shard_image> image_for(const std::filesystem::path& dir, const std::vector<std::string>& files,
                                std::optional<std::size_t> own, const std::vector<key_range>& ranges,
                                const checkpoint_identity& id);

}  // namespace troupe
