// Where a pipeline's stages sit in the model and in the shards: the cut points (given,
// or balanced by FLOPs, parameter count or measured time), each stage's layers and its
// contiguous range of the model's flat parameter vector, the key ranges a stage packs
// into each shard, and each shard's slice per stage (shard_config::stage_slices, Note
// [Slices]).
//
// A stage's parameters are one contiguous range of the flat vector (blocks are laid out
// in layer order and a stage is consecutive layers), and a shard's buffer is its ranges in
// offset order, so a stage's part of any shard is one contiguous slice too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "core/key_table.hpp"
#include "train/model.hpp"

namespace troupe {

// What a pipeline's stages are balanced by: forward FLOPs per sample, parameter count, or
// the time each layer's forward and backward take, measured on this process's host
// (train/layer_profile.hpp).
enum class stage_balance : std::uint8_t { flops = 0, params = 1, time = 2 };
expected<stage_balance> parse_stage_balance(std::string_view name);
std::string_view name_of(stage_balance b);

// Per layer of m, the cost `by` counts. `time` profiles every layer on
// `microbatch_rows` rows on the host (its seconds forward plus backward); the others
// ignore the rows.
expected<std::vector<double>> layer_costs(const model& m, stage_balance by, std::int64_t microbatch_rows);

// Cut points (layer indices, strictly increasing) that split layers with these costs into
// `stages` consecutive stages minimising the largest stage's cost; ties keep the earliest
// cut. Fails when there are fewer layers than stages (naming the model).
expected<std::vector<int>> cuts_by_cost(const std::vector<double>& cost, int stages, const std::string& model_name);
// The same over m's FLOPs or parameters (a model-only shortcut; `time` is refused, as it
// needs a profile: use layer_costs).
expected<std::vector<int>> balanced_cuts(const model& m, int stages, stage_balance by);
// Each stage's cost under the cuts.
std::vector<double> stage_costs(const std::vector<double>& cost, const std::vector<int>& cuts);

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
