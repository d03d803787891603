// checkpoint_store: a job's checkpoints in one directory, each complete or not there at
// all, the newest K kept, and the newest good one found even when a later one is damaged.
//
// Note [Checkpoint directory]
// DIR/ckpt-<step, 12 digits>/ holds one checkpoint: the files its roles write (a shard's
// slice and optimizer state, the coordinator's job state: tensor files, Note [Tensor
// files]), and last its manifest, MANIFEST.tf, a tensor file of kind "troupe-manifest"
// whose meta says the job, the step and which files make the checkpoint. A checkpoint is
// complete exactly when its manifest reads back clean: every file is written durably
// before the manifest (Note [Durable replace]), so a crash at any moment leaves either
// a complete checkpoint or one without a manifest, which is ignored and removed by the
// next commit. A commit removes checkpoints older than the newest `keep` complete ones,
// and never the one it just completed, so the last good checkpoint is gone only once a
// newer one is whole. Finding the one to resume from walks the complete ones newest
// first and takes the first whose manifest and every named file pass their checks; each
// one skipped is reported with why, for the caller to warn.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"

namespace troupe {

class checkpoint_store {
 public:
  // keep >= 1: how many complete checkpoints a commit leaves.
  checkpoint_store(std::filesystem::path dir, int keep);

  const std::filesystem::path& dir() const { return dir_; }
  // The directory for checkpoint `step`, created (with DIR) if need be and cleared of the
  // temporaries of writers that died (Note [Durable replace]); the roles write their
  // files in it. Why not, when it cannot be created.
  expected<std::filesystem::path> begin(std::int64_t step) const;
  // Completes checkpoint `step`: its manifest, naming `files` (in its directory) and
  // carrying `meta`, then the removal of what no longer needs keeping. Every file must
  // exist; why not.
  std::optional<std::string> commit(std::int64_t step, const std::vector<std::string>& files,
                                    const nlohmann::json& meta) const;

  // Where checkpoint `step` is (DIR/ckpt-<step, 12 digits>), whether or not it exists.
  std::filesystem::path step_dir(std::int64_t step) const;

  // The steps of complete checkpoints (a manifest is there), newest first.
  std::vector<std::int64_t> complete() const;

  struct found {
    std::int64_t step = 0;
    std::filesystem::path dir;
    nlohmann::json meta;
    std::vector<std::string> files;
    std::vector<std::string> skipped;  // newer checkpoints passed over, each with why
  };
  // Checks one named file of a checkpoint (typically reading it as its kind); why it is bad.
  using file_check = std::function<std::optional<std::string>(const std::filesystem::path& file)>;
  // The newest checkpoint whose manifest and files pass; why none does.
  expected<found> latest_good(const file_check& check) const;

 private:
  std::filesystem::path dir_;
  int keep_;
};

}  // namespace troupe
