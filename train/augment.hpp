// Augmentation of training samples in the data path (`--augment`): for images, random
// crops of the image padded by a margin, and horizontal flips, as torchvision's
// RandomCrop(padding) and RandomHorizontalFlip do; for a text's windows, a shift of every
// window by one offset an epoch (Note [Shifted windows]). Each draw comes from (seed,
// epoch) and, for images, the sample's index in the training set, so an augmented run is
// as reproducible as a plain one and does not depend on which worker, stage or
// microbatch the sample lands in. Evaluation never augments.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"
#include "train/dataset.hpp"

namespace troupe {

struct augmentation {
  bool flip = false;          // images: mirror left-right with probability 1/2
  std::int64_t crop_pad = 0;  // images: shift by up to this many pixels each way, filling with the background
  bool shift = false;         // a text's windows: start each epoch's windows at a new offset
  bool of_images() const { return flip || crop_pad > 0; }
  bool any() const { return of_images() || shift; }
};

// "none", or a comma-separated list of "flip", "crop" (a margin of 2), "crop=N" (N from 1
// to 16) and "shift". Errors say what is accepted.
expected<augmentation> parse_augmentation(std::string_view text);
// The canonical text: "none", "crop=2", "flip", "crop=2,flip" or "shift".
std::string name_of(const augmentation& a);

// Why `a` cannot augment d's samples, or nothing: crops and flips need images (C, H, W),
// and shift a text's windows (train/text_dataset.hpp).
std::optional<failure> augmentation_unfit(const augmentation& a, const dataset& d);

// Augments each image of `images` (B, C, H, W) in place; image i is training sample
// ids[i] and draws from derive_seed(seed, {epoch, ids[i]}). `background` fills what a
// crop shifts in (a blank pixel's normalised value).
void augment_images(tensor_view images, const augmentation& a, std::span<const std::int64_t> ids, std::uint64_t seed,
                    std::int64_t epoch, float background);

// Note [Shifted windows]
// ~~~~~~~~~~~~~~~~~~~~~~
// A text's training windows lie end to end: window k is characters [kT, (k+1)T) of the
// training split, labels one further on. Without a shift every epoch shows each character
// at the same place in the same window, and a model learns those exact windows by heart
// (on fortunes, the training loss falls while the validation loss turns up). With
// `--augment shift`, epoch e draws one offset s in [0, T) from (seed, e), and sample k
// becomes characters [kT + s, (k+1)T + s): the tail of window k and the head of window
// k + 1. Each epoch therefore still shows every character of the split once, in a new
// place and after a new stretch of context; the last window, which has no successor,
// stays where it is. The offset is the same for every sample of an epoch, so a sample's
// tokens and labels depend only on (seed, epoch, k), never on the worker, stage or
// microbatch.

// The offset epoch `epoch` shifts a text's windows of `context` characters by, in [0, context).
std::int64_t window_shift(std::uint64_t seed, std::int64_t epoch, std::int64_t context);

// With a.shift, overwrites the gathered windows `tokens` (B, T) and `labels` (B, T) with
// training windows ids[i] of `train` moved by window_shift(seed, epoch, T); otherwise
// leaves them. `train` is the text's training split, whose windows lie end to end.
void shift_windows(tensor_view tokens, tensor_view labels, const augmentation& a, std::span<const std::int64_t> ids,
                   const dataset& train, std::uint64_t seed, std::int64_t epoch);

}  // namespace troupe
