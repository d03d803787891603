// The key-range table: how the model's flat parameter vector is split across S shard
// servers. Each block of the model becomes one range, or several when it is larger than
// the big-array bound (as MXNet's MXNET_KVSTORE_BIGARRAY_BOUND does); ranges go to the
// least-loaded shard, largest first, so shards hold nearly equal numbers of floats.
// A shard's own buffer is its ranges concatenated in increasing offset order.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.hpp"
#include "train/model.hpp"

namespace troupe {

struct key_range {
  std::uint32_t shard = 0;
  std::int32_t block = 0;   // model block index
  std::int64_t offset = 0;  // into the model's flat parameter vector
  std::int64_t length = 0;
};

struct key_table {
  std::vector<key_range> ranges;          // sorted by offset; they tile [0, num_params)
  std::vector<std::int64_t> shard_numel;  // floats per shard

  std::uint32_t shards() const { return static_cast<std::uint32_t>(shard_numel.size()); }
  // The ranges of one shard, in its buffer order.
  std::vector<key_range> ranges_of(std::uint32_t shard) const;
};

// bound <= 0 picks max(1024, num_params / (4 * shards)) so that no shard ends up much
// heavier than another; with one shard nothing is split.
key_table partition_parameters(const model& m, std::uint32_t shards, std::int64_t bound);

// (offset, length) ranges of a shard's buffer, in buffer order: the part of it one
// pipeline stage owns (Note [Slices] in core/shard_core_slices.cpp).
using shard_slice = std::vector<std::pair<std::int64_t, std::int64_t>>;

// shard_buffer (shard_numel[s]) <- the shard's ranges of flat (num_params).
void pack_shard(tensor_view shard_buffer, const_tensor_view flat, const std::vector<key_range>& ranges);
// flat's ranges of the shard <- shard_buffer.
void unpack_shard(tensor_view flat, const_tensor_view shard_buffer, const std::vector<key_range>& ranges);

}  // namespace troupe
