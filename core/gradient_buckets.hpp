// gradient_buckets: how a member cuts its gradient into buckets that leave for the shards
// as soon as backward has produced them (Note [Gradient buckets]): the buckets, cut at
// layer boundaries from the last layer down, and where a bucket's parameters lie in the
// packed slice the member pushes to each shard.
//
// Note [Gradient buckets]
// Backward produces the gradients of the last layers first. With buckets, the member runs
// the step's last backward down to each bucket's lowest layer, pushes that bucket's piece
// of every shard's slice (Note [Gradient pieces] in core/shard_core.hpp), and only then
// computes the layers below, so the pieces cross the network while backward goes on, as
// DDP's gradient buckets do. A bucket holds at least --bucket-bytes of parameters (the
// lowest may hold less); 0 turns buckets off: one push per shard after backward. The
// shard assembles the pieces and makes the update of one whole push, so the results are
// bitwise those without buckets. Pieces pay on the network only: a shard in this process
// (the message shares the tensor) or reached through the same-host fast path (one slot
// per push) gets the whole slice after backward.
#pragma once

#include <cstdint>
#include <vector>

#include "core/key_table.hpp"
#include "tensor/model.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

struct gradient_bucket {
  int bottom_layer = 0, top_layer = 0;  // the stage's layers [bottom, top)
  std::int64_t lo = 0, hi = 0;          // their parameters: offsets [lo, hi) in the stage's buffer
};

// The buckets of `stage`, in the order backward completes them (the highest layers
// first); each holds at least bucket_bytes of parameters except the last, which ends at
// layer 0. One bucket (the whole stage) when bucket_bytes <= 0, when the stage is smaller,
// or when its parameters are not laid out in layer order.
std::vector<gradient_bucket> plan_buckets(const model& stage, std::int64_t bucket_bytes);

// A piece of a shard slice: where it starts and how many elements it holds.
struct slice_piece {
  std::int64_t offset = 0, numel = 0;
};

// Where the stage's parameters [lo, hi) lie in the slice packed from `ranges` (stage
// offsets, sorted by offset, as key_table keeps them): one contiguous piece.
slice_piece piece_of(const std::vector<key_range>& ranges, std::int64_t lo, std::int64_t hi);

// Packs that piece from the stage's flat buffer `flat` into `out` (piece_of(...).numel floats).
void pack_piece(tensor_view out, const_tensor_view flat, const std::vector<key_range>& ranges, std::int64_t lo,
                std::int64_t hi);

}  // namespace troupe
