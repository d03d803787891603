// Where a pipeline's stages sit in the model and in the shards: the cut points (given,
// or balanced by FLOPs or parameter count), each stage's layers and its contiguous range
// of the model's flat parameter vector, the key ranges a stage packs into each shard,
// and each shard's slice per stage (shard_config::stage_slices, Note [Slices]).
//
// A stage's parameters are one contiguous range of the flat vector (blocks are laid out
// in layer order and a stage is consecutive layers), and a shard's buffer is its ranges in
// offset order, so a stage's part of any shard is one contiguous slice too.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "core/key_table.hpp"
#include "tensor/model.hpp"

namespace troupe {

enum class stage_balance : std::uint8_t { flops = 0, params = 1 };
expected<stage_balance> parse_stage_balance(std::string_view name);
std::string_view name_of(stage_balance b);

// Cut points (layer indices, strictly increasing) that split m into `stages` consecutive
// stages minimising the largest stage's cost: forward FLOPs per sample or parameter
// count. Fails when the model has fewer layers than stages.
expected<std::vector<int>> balanced_cuts(const model& m, int stages, stage_balance by);

struct stage_span {
  int first_layer = 0, last_layer = 0;  // [first, last)
  std::int64_t param_offset = 0;        // into the full model's flat parameters
  std::int64_t numel = 0;
};

// The stages of m cut at `cuts` (which must be valid for m).
std::vector<stage_span> stage_spans(const model& m, const std::vector<int>& cuts);

// The part of a shard's ranges (buffer order) that lies in the stage, with offsets rebased
// onto the stage's own flat buffer: what pack_shard/unpack_shard need on that stage.
std::vector<key_range> stage_ranges(const std::vector<key_range>& shard_ranges, const stage_span& stage);

// Per stage, where its parameters sit in the shard's buffer.
std::vector<shard_slice> shard_stage_slices(const std::vector<key_range>& shard_ranges,
                                            const std::vector<stage_span>& stages);

}  // namespace troupe
