// kv_checkpoint: a key-value job's checkpoints: each shard's file of the key parts it holds
// (their values, the shards' optimizer and its state per part, their versions), the keys
// the coordinator's job state names, and where a resumed key-value job starts.
//
// Note [Key-value checkpoints]
// A user's loop names its own keys, so a key-value job's checkpoint holds those keys as
// the shards keep them. Its step S counts rounds of the keys the loop pushes (Note
// [Checkpoint steps] in core/shard_core_checkpoints.cpp): a shard takes its image once
// every key part it holds that has been pushed at all has closed S rounds (sync) or been
// pushed S times by its slowest live member (async and ssp); a key nobody has pushed does
// not hold it back and is kept as it is. A shard with no key that holds it back (one key
// and two shards, for one) reaches no step by itself: the coordinator asks every shard for
// step S when the first file of S comes, and such a shard takes its image then. A loop that pushes every key every step (what
// troupe.torch and troupe.horovod do) so checkpoints its step S: in sync every shard's
// image is then the state after exactly S rounds of every key, a state the job passed
// through. Each shard writes kv-shard-<index>.tf, a tensor file (Note [Tensor files]) of
// kind "troupe-kv-shard-state" whose meta says {"identity", "shard", "step", "optimizer"
// (the shards' optimizer and schedule, or none), "parts": [{"id", "key", "version",
// "steps"}]} and whose sections are "value:ID", "slot1:ID" and (Adam) "slot2:ID" per part.
// The coordinator's job.tf names the keys (their ids, names, shapes and where each part
// lies) as its registry held them at the commit. A resumed job (--resume, or launch
// restarting it) restores the keys whose every part is in its shard's file (a key defined
// after a shard took its image is left out, and the loop's init defines it again), on as
// many shard servers as the checkpoint was taken on; each shard restores its parts, their
// optimizer state and versions, and the shards' optimizer, so a loop that goes on from
// step S (troupe.kv's resumed_step) continues as the checkpointed run did: in sync,
// bitwise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "core/kv_layout.hpp"
#include "core/shard_checkpoint.hpp"
#include "tensor/optimizer.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

struct kv_part_image {
  kv_part_id id = 0;
  std::string key;  // canonical (kv_key_name)
  std::int64_t version = 0;
  std::int64_t optimizer_steps = 0;
  tensor value, slot1, slot2;  // slots: none without the shards' optimizer; slot2 for Adam only
};

struct kv_shard_image {
  std::uint32_t shard = 0;
  std::int64_t step = 0;
  bool has_optimizer = false;
  optimizer_config optimizer;
  lr_schedule schedule;
  std::vector<kv_part_image> parts;
};

inline constexpr const char* kv_shard_state_kind = "troupe-kv-shard-state";
std::string kv_shard_file_name(std::uint32_t shard);

// Writes the image durably; why not.
std::optional<std::string> write_kv_shard_image(const std::filesystem::path& path, const kv_shard_image& s,
                                                const checkpoint_identity& id);
// Reads and checks one shard's file against the identity it must carry.
expected<kv_shard_image> read_kv_shard_image(const std::filesystem::path& path, const checkpoint_identity& id);

// The registry's keys as the job state keeps them, and back; why not, naming the field.
nlohmann::json keys_to_json(const std::vector<kv_key_layout>& keys);
expected<std::vector<kv_key_layout>> keys_from_json(const nlohmann::json& j);

// Of `keys`, those whose every part is among the parts of the shards' images (by shard).
std::vector<kv_key_layout> keys_held_whole(const std::vector<kv_key_layout>& keys,
                                           const std::vector<std::vector<kv_part_id>>& parts_by_shard);

}  // namespace troupe
