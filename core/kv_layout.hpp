// The key layout of a key-value job (the client library's jobs, where the user's training
// loop names its own parameters): which shard holds which rows of each key, decided once
// when the key is first initialised and then the same for every worker.
//
// Note [Keys and parts]
// A key is an integer or a UTF-8 string (MXNet's KVStore allows either); `kv_key_name`
// makes them one namespace ("i:3", "s:fc1.weight") so 3 and "3" stay different keys. A
// key's array is split by rows (its first dimension) into parts of at most `bound`
// elements (MXNet's big-array bound; a row is never split, so a row_sparse pull of some
// rows asks only the shards that hold them), and each part goes to the shard holding
// the fewest elements so far (ties to the lowest index), so shards stay balanced.
// Part ids are (key id << 16 | part index): unique in the job, stable, and cheap to send.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/errc.hpp"
#include "base/expected.hpp"

namespace troupe {

// The canonical name of an integer key / a string key; the string must be valid UTF-8.
std::string kv_key_name(std::int64_t key);
std::string kv_key_name(std::string_view key);
// How errors show a key: 3, or "fc1.weight" in quotes.
std::string kv_key_display(std::string_view canonical);
bool valid_utf8(std::string_view s);

// The most floats one key-value message (a part, or a push or pull of several) carries:
// 16 MiB, well under every node's frame bound (Note [Bounded frames]).
inline constexpr std::int64_t kv_max_message_floats = std::int64_t{4} << 20;
// The most elements one key may hold (2^40, 4 TiB of floats): shapes beyond are refused
// before any arithmetic on them can overflow.
inline constexpr std::int64_t kv_max_key_floats = std::int64_t{1} << 40;

using kv_part_id = std::uint64_t;
inline constexpr int kv_max_parts = 1 << 16;
inline kv_part_id make_part_id(std::uint32_t key, std::uint32_t part) {
  return (static_cast<kv_part_id>(key) << 16) | part;
}
// The part that holds a training job's stage `stage` on its shard (Note [Slices] in
// core/shard_core_slices.cpp); no key of a key-value job has this key id.
inline kv_part_id stage_part(std::uint32_t stage) { return make_part_id(0xFFFFFFFFu, stage); }

struct kv_part {
  kv_part_id id = 0;
  std::uint32_t shard = 0;
  std::int64_t row_begin = 0, rows = 0;  // of the key's first dimension
  std::int64_t numel = 0;                // rows * row_numel
};

struct kv_key_layout {
  std::uint32_t id = 0;
  std::string name;                // canonical (kv_key_name)
  std::vector<std::int64_t> dims;  // the array's shape; {} for a scalar
  std::vector<kv_part> parts;      // in row order; they tile the key's rows
  std::int64_t numel() const;
  std::int64_t rows() const;       // dims[0], or 1 for a scalar
  std::int64_t row_numel() const;  // elements per row
};

// The layout of every key of a job, as the coordinator (or a local store) keeps it.
class kv_registry {
 public:
  // bound <= 0 means MXNet's default, 1,000,000 elements; a bound above
  // kv_max_message_floats is lowered to it.
  kv_registry(std::uint32_t shards, std::int64_t bound);

  struct init_outcome {
    const kv_key_layout* layout = nullptr;  // valid until the next define
    bool created = false;                   // this call defined the key (its value wins)
    std::optional<fault> error;
  };
  // Defines `name` with `dims`, or finds it: a second init with the same shape finds the
  // first one's layout (its value is ignored: the first init wins); another shape is a
  // bad_shape error naming the key and both shapes.
  init_outcome init(const std::string& name, const std::vector<std::int64_t>& dims);

  const kv_key_layout* find(const std::string& name) const;
  const kv_key_layout* find(std::uint32_t id) const;
  std::size_t size() const { return by_name_.size(); }
  // Every key, by id.
  std::vector<kv_key_layout> keys() const;
  // A registry that holds exactly `keys` (a resumed job's, Note [Key-value checkpoints] in
  // core/kv_checkpoint.hpp), with their ids and placements; ids it does not hold stay
  // unused, and keys defined later take ids after the highest. Why not, when a key is
  // malformed (a part on a shard the job does not have, a name or an id twice).
  static expected<kv_registry> restore(std::uint32_t shards, std::int64_t bound, std::vector<kv_key_layout> keys);
  const std::vector<std::int64_t>& shard_numel() const { return shard_numel_; }

 private:
  std::int64_t bound_;
  std::vector<std::int64_t> shard_numel_;
  std::vector<kv_key_layout> keys_;  // by id; a restored registry's unused ids hold no name
  std::map<std::string, std::uint32_t> by_name_;
};

// "(3, 4)" for error messages.
std::string dims_str(const std::vector<std::int64_t>& dims);

}  // namespace troupe
