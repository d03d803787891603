// gradient_buckets: how a member cuts its parameters into buckets that travel between it
// and the shards while it computes (Note [Gradient buckets]): the buckets, cut at layer
// boundaries from the last layer down, and where a bucket's parameters lie in the packed
// slice the member exchanges with each shard.
//
// Note [Gradient buckets]
// Backward produces the gradients of the last layers first, and forward needs the
// parameters of the first layers first. With buckets, the member
//  - pulls one piece of every shard's slice per bucket, the lowest layers' first, and
//    starts the step's first forward as soon as the lowest bucket is here, going on
//    layer by layer as the others arrive (every later action waits for all of them);
//  - runs the step's last backward down to each bucket's lowest layer, pushes that
//    bucket's piece of every shard's slice (Note [Gradient pieces] in
//    core/shard_core_pieces.cpp), and only then computes the layers below,
// so the bytes cross the network while the member computes, as DDP's gradient buckets do.
// A bucket holds at least --bucket-bytes of parameters (the lowest may hold less); 0
// turns buckets off: one pull and one push per shard. cut_buckets is that rule for any
// list of tensors in the order backward completes them; troupe.torch cuts a user's
// parameters with it too, so both kinds of member bucket alike. The shard assembles the
// pieces and makes the update of one whole push, and every piece of a pull is cut from
// the same parameters in sync, so the results are bitwise those without buckets (in async
// and ssp the pieces of one pull may come from different versions; the oldest counts as
// the version the gradient was computed on). Pieces pay on the network only: a shard in
// this process (the message shares the tensor) or reached through the same-host fast path
// (one slot per call) is pulled and pushed whole; with --pull-precision 2bit every pull
// is whole (a member's view is of its whole slice).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/key_table.hpp"
#include "tensor/tensor.hpp"
#include "train/model.hpp"

namespace troupe {

// Consecutive items [first, last) of a list, one bucket.
struct bucket_cut {
  std::size_t first = 0, last = 0;
};

// Cuts items of these sizes in bytes (in the order backward completes them) into buckets
// of consecutive items, each closed as soon as it holds at least min_bytes; the last holds
// what is left, and joins the one before when it holds no bytes. min_bytes <= 0: every
// item alone. No items: no buckets.
std::vector<bucket_cut> cut_buckets(const std::vector<std::int64_t>& bytes, std::int64_t min_bytes);

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

// The reverse: writes `piece` (piece_of(...).numel floats) back where it lies in `flat`.
void unpack_piece(tensor_view flat, const_tensor_view piece, const std::vector<key_range>& ranges, std::int64_t lo,
                  std::int64_t hi);

}  // namespace troupe
