// gradient_buckets: the bucket plan and the pieces of shard slices (Note [Gradient buckets]).
#include "core/gradient_buckets.hpp"

#include <algorithm>
#include <cstring>

#include "base/check.hpp"

namespace troupe {

std::vector<gradient_bucket> plan_buckets(const model& stage, std::int64_t bucket_bytes) {
  const int layers = stage.num_layers();
  // starts[l]: where the parameters of layers >= l begin (num_params when they have none).
  std::vector<std::int64_t> starts(static_cast<std::size_t>(layers) + 1, stage.num_params());
  for (const param_block& b : stage.blocks())
    for (int l = 0; l <= b.layer; ++l) starts[l] = std::min(starts[l], b.offset);
  bool layer_order = true;
  for (const param_block& b : stage.blocks())
    layer_order = layer_order && b.offset >= starts[b.layer] && b.offset + b.numel <= starts[b.layer + 1];
  const gradient_bucket whole{0, layers, 0, stage.num_params()};
  if (bucket_bytes <= 0 || !layer_order || starts[0] != 0) return {whole};
  std::vector<gradient_bucket> out;
  int top = layers;
  for (int l = layers - 1; l > 0; --l)
    if (static_cast<std::int64_t>(sizeof(float)) * (starts[top] - starts[l]) >= bucket_bytes) {
      out.push_back({l, top, starts[l], starts[top]});
      top = l;
    }
  if (starts[top] > 0 || out.empty())
    out.push_back({0, top, 0, starts[top]});
  else
    out.back().bottom_layer = 0;  // the layers below hold no parameters: they finish the last bucket
  return out;
}

slice_piece piece_of(const std::vector<key_range>& ranges, std::int64_t lo, std::int64_t hi) {
  slice_piece p;
  std::int64_t pos = 0;
  bool started = false;
  for (const key_range& r : ranges) {
    const std::int64_t a = std::max(lo, r.offset), b = std::min(hi, r.offset + r.length);
    if (a < b) {
      if (!started) p.offset = pos + (a - r.offset);
      TROUPE_CHECK(!started || a == r.offset, "piece_of: ranges out of order");
      started = true;
      p.numel += b - a;
    }
    pos += r.length;
  }
  if (!started) p.offset = 0;
  return p;
}

void pack_piece(tensor_view out, const_tensor_view flat, const std::vector<key_range>& ranges, std::int64_t lo,
                std::int64_t hi) {
  float* dst = out.data<float>();
  const float* src = flat.data<float>();
  std::int64_t pos = 0;
  for (const key_range& r : ranges) {
    const std::int64_t a = std::max(lo, r.offset), b = std::min(hi, r.offset + r.length);
    if (a >= b) continue;
    TROUPE_CHECK(b <= flat.numel() && pos + (b - a) <= out.numel(), "pack_piece bounds");
    std::memcpy(dst + pos, src + a, sizeof(float) * static_cast<std::size_t>(b - a));
    pos += b - a;
  }
  TROUPE_CHECK(pos == out.numel(), "pack_piece: the output does not match the piece");
}

void unpack_piece(tensor_view flat, const_tensor_view piece, const std::vector<key_range>& ranges, std::int64_t lo,
                  std::int64_t hi) {
  float* dst = flat.data<float>();
  const float* src = piece.data<float>();
  std::int64_t pos = 0;
  for (const key_range& r : ranges) {
    const std::int64_t a = std::max(lo, r.offset), b = std::min(hi, r.offset + r.length);
    if (a >= b) continue;
    TROUPE_CHECK(b <= flat.numel() && pos + (b - a) <= piece.numel(), "unpack_piece bounds");
    std::memcpy(dst + a, src + pos, sizeof(float) * static_cast<std::size_t>(b - a));
    pos += b - a;
  }
  TROUPE_CHECK(pos == piece.numel(), "unpack_piece: the piece does not match the ranges");
}

}  // namespace troupe
