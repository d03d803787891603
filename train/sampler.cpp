// epoch_permutation, epoch_indices and gather_batch.
#include "train/sampler.hpp"

#include <cstring>
#include <numeric>

#include "tensor/random.hpp"

namespace troupe {

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  rng r(derive_seed(seed, {0xda7a, static_cast<std::uint64_t>(epoch)}));
  r.shuffle(std::span<std::int64_t>(perm));
  return perm;
}

std::vector<std::int64_t> epoch_indices(std::int64_t n, std::uint64_t seed, std::int64_t epoch, int rank, int world) {
  TROUPE_CHECK(world >= 1 && rank >= 0 && rank < world, "epoch_indices: rank out of range");
  const std::vector<std::int64_t> perm = epoch_permutation(n, seed, epoch);
  const std::int64_t per_rank = n / world;
  std::vector<std::int64_t> mine(static_cast<std::size_t>(per_rank));
  for (std::int64_t i = 0; i < per_rank; ++i) mine[i] = perm[i * world + rank];
  return mine;
}

void gather_batch(tensor_view images_out, tensor_view labels_out, const dataset& d,
                  std::span<const std::int64_t> idx) {
  const std::int64_t b = static_cast<std::int64_t>(idx.size());
  const std::int64_t row = d.sample_shape().numel(), labels = d.labels_per_sample();
  TROUPE_CHECK(images_out.numel() == b * row && labels_out.numel() == b * labels, "gather_batch: output sizes");
  float* x = images_out.data<float>();
  std::int32_t* y = labels_out.data<std::int32_t>();
  const float* src = d.images.data<float>();
  const std::int32_t* lab = d.labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < b; ++i) {
    TROUPE_CHECK(idx[i] >= 0 && idx[i] < d.size(), "gather_batch: index out of range");
    std::memcpy(x + i * row, src + idx[i] * row, sizeof(float) * row);
    std::memcpy(y + i * labels, lab + idx[i] * labels, sizeof(std::int32_t) * labels);
  }
}

}  // namespace troupe
