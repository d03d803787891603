// Deterministic shuffling, sharding by (rank, world) and batch assembly.
// Every epoch draws a fresh permutation of the whole dataset from (seed, epoch); rank r of
// W takes every W-th entry starting at r, and the n % W left over are dropped so every
// rank sees the same number of samples (sync rounds stay aligned).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/dataset.hpp"

namespace troupe {

std::vector<std::int64_t> epoch_indices(std::int64_t n, std::uint64_t seed, std::int64_t epoch, int rank, int world);
// The whole permutation epoch_indices deals from: rank r of W gets its entries r, r + W, ...
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

// images_out (B, sample...) and labels_out (B, labels per sample) <- the samples at idx (B entries).
void gather_batch(tensor_view images_out, tensor_view labels_out, const dataset& d,
                  std::span<const std::int64_t> idx);

}  // namespace troupe
