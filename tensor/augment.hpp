// Augmentation of training images in the data path (`--augment`): random crops of the
// image padded by a margin, and horizontal flips, as torchvision's RandomCrop(padding)
// and RandomHorizontalFlip do. Each sample draws from (seed, epoch, its index in the
// training set), so an augmented run is as reproducible as a plain one and does not
// depend on which worker or microbatch the sample lands in. Evaluation never augments.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <optional>

#include "base/expected.hpp"
#include "tensor/dataset.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

struct augmentation {
  bool flip = false;          // mirror left-right with probability 1/2
  std::int64_t crop_pad = 0;  // shift by up to this many pixels each way, filling with the background
  bool any() const { return flip || crop_pad > 0; }
};

// "none", or a comma-separated list of "flip", "crop" (a margin of 2) and "crop=N" (N
// from 1 to 16). Errors say what is accepted.
expected<augmentation> parse_augmentation(std::string_view text);
// The canonical text: "none", "crop=2", "flip" or "crop=2,flip".
std::string name_of(const augmentation& a);

// Why `a` cannot augment d's samples (they are not images, (C, H, W)), or nothing.
std::optional<failure> augmentation_unfit(const augmentation& a, const dataset& d);

// Augments each image of `images` (B, C, H, W) in place; image i is training sample
// ids[i] and draws from derive_seed(seed, {epoch, ids[i]}). `background` fills what a
// crop shifts in (a blank pixel's normalised value).
void augment_images(tensor_view images, const augmentation& a, std::span<const std::int64_t> ids, std::uint64_t seed,
                    std::int64_t epoch, float background);

}  // namespace troupe
