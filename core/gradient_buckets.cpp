// gradient_buckets: the bucket plan and the pieces of shard slices (Note [Gradient buckets]).
#include "core/gradient_buckets.hpp"

#include <algorithm>
#include <cstring>

#include "base/check.hpp"

namespace troupe {

std::vector<bucket_cut> cut_buckets(const std::vector<std::int64_t>& bytes, std::int64_t min_bytes) {
  std::vector<bucket_cut> out;
  std::int64_t held = 0;  // bytes of the open bucket
  bool open = false;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    TROUPE_CHECK(bytes[i] >= 0, "cut_buckets: a negative size");
    if (!open) {
      out.push_back(bucket_cut{.first = i, .last = i});
      held = 0;
      open = true;
    }
    ++out.back().last;
    held += bytes[i];
    open = held < min_bytes;
  }
  if (open && held == 0 && out.size() > 1) {  // a last bucket with no bytes joins the one before
    out.pop_back();
    out.back().last = bytes.size();
  }
  return out;
}

std::vector<gradient_bucket> plan_buckets(const model& stage, std::int64_t bucket_bytes) {
  const int layers = stage.num_layers();
  // starts[l]: where the parameters of layers >= l begin (num_params when they have none).
  std::vector<std::int64_t> starts(static_cast<std::size_t>(layers) + 1, stage.num_params());
  for (const param_block& b : stage.blocks())
    for (int l = 0; l <= b.layer; ++l) starts[l] = std::min(starts[l], b.offset);
  bool layer_order = true;
  for (const param_block& b : stage.blocks())
    layer_order = layer_order && b.offset >= starts[b.layer] && b.offset + b.numel <= starts[b.layer + 1];
  const gradient_bucket whole{.bottom_layer = 0, .top_layer = layers, .lo = 0, .hi = stage.num_params()};
  if (bucket_bytes <= 0 || !layer_order || starts[0] != 0 || layers == 0) return {whole};
  std::vector<std::int64_t> bytes;  // the layers' parameters, from the top layer down
  for (int l = layers - 1; l >= 0; --l)
    bytes.push_back(static_cast<std::int64_t>(sizeof(float)) * (starts[l + 1] - starts[l]));
  std::vector<gradient_bucket> out;
  for (const bucket_cut& c : cut_buckets(bytes, bucket_bytes)) {
    const int top = layers - static_cast<int>(c.first), bottom = layers - static_cast<int>(c.last);
    out.push_back({.bottom_layer = bottom, .top_layer = top, .lo = starts[bottom], .hi = starts[top]});
  }
  return out;
}

namespace {

// Calls f(stage_offset, packed_offset, count) for each run of the stage's elements
// [lo, hi) that `ranges` hold, in packed order.
template <class F>
void for_each_run(const std::vector<key_range>& ranges, std::int64_t lo, std::int64_t hi, F&& f) {
  std::int64_t pos = 0;
  for (const key_range& r : ranges) {
    const std::int64_t a = std::max(lo, r.offset), b = std::min(hi, r.offset + r.length);
    if (a < b) f(a, pos + (a - r.offset), b - a);
    pos += r.length;
  }
}

}  // namespace

slice_piece piece_of(const std::vector<key_range>& ranges, std::int64_t lo, std::int64_t hi) {
  slice_piece p;
  for_each_run(ranges, lo, hi, [&](std::int64_t, std::int64_t packed, std::int64_t n) {
    if (p.numel == 0) p.offset = packed;
    TROUPE_CHECK(packed == p.offset + p.numel, "piece_of: ranges out of order");
    p.numel += n;
  });
  return p;
}

void pack_piece(tensor_view out, const_tensor_view flat, const std::vector<key_range>& ranges, std::int64_t lo,
                std::int64_t hi) {
  const slice_piece p = piece_of(ranges, lo, hi);
  TROUPE_CHECK(out.numel() == p.numel && hi <= flat.numel(), "pack_piece: the output does not match the piece");
  for_each_run(ranges, lo, hi, [&](std::int64_t at, std::int64_t packed, std::int64_t n) {
    std::memcpy(out.data<float>() + (packed - p.offset), flat.data<float>() + at,
                sizeof(float) * static_cast<std::size_t>(n));
  });
}

void unpack_piece(tensor_view flat, const_tensor_view piece, const std::vector<key_range>& ranges, std::int64_t lo,
                  std::int64_t hi) {
  const slice_piece p = piece_of(ranges, lo, hi);
  TROUPE_CHECK(piece.numel() == p.numel && hi <= flat.numel(), "unpack_piece: the piece does not match the ranges");
  for_each_run(ranges, lo, hi, [&](std::int64_t at, std::int64_t packed, std::int64_t n) {
    std::memcpy(flat.data<float>() + at, piece.data<float>() + (packed - p.offset),
                sizeof(float) * static_cast<std::size_t>(n));
  });
}

}  // namespace troupe
