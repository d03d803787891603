// Datasets in memory: images as normalised f32 (N, C, H, W), labels as i32 (N).
// Fashion-MNIST is read from IDX files (Debian's dataset-fashion-mnist by default); a
// synthetic set of Gaussian class clusters serves tests and benchmarks. Normalisation uses
// the training set's pixel mean and standard deviation for both splits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

inline constexpr std::string_view default_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

struct dataset {
  std::string name;
  tensor images;  // (N, C, H, W) f32; a text's (N, T) token ids (train/text_dataset.hpp)
  tensor labels;  // (N) i32, each in [0, num_classes); a text's (N, T), the next token at each position
  std::int64_t num_classes = 0;

  std::int64_t size() const { return labels.rank() == 0 ? 0 : labels.size(0); }
  std::int64_t labels_per_sample() const { return size() == 0 ? 1 : labels.numel() / size(); }
  shape sample_shape() const { return images.sizes().drop_front(); }
};

struct dataset_split {
  dataset train, test;
  float pixel_mean = 0.f, pixel_std = 1.f;  // of the raw [0, 1] training pixels
  std::vector<std::string> vocabulary;       // a text's: each class id's character (UTF-8); else empty
};

// fortunes (Debian's) and text:FILE are train/text_dataset.hpp's.
enum class dataset_kind : std::uint8_t { fashion_mnist, synthetic, fortunes, text };
expected<dataset_kind> parse_dataset_kind(std::string_view name);
std::string_view name_of(dataset_kind k);

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from dir.
expected<dataset_split> load_fashion_mnist(const std::string& dir);

// Ten classes of 1x28x28 samples around fixed random prototypes; learnable to high accuracy.
dataset_split make_synthetic(std::int64_t train_size, std::int64_t test_size, std::uint64_t seed);

// The first n samples (all of them when n >= size or n <= 0).
dataset head(const dataset& d, std::int64_t n);

// What a job names: the dataset by name ("fashion-mnist" from dir, "synthetic" of
// Fashion-MNIST's sizes from seed, "fortunes" or "text:FILE" in windows of `context`
// characters), keeping the first train_samples training samples (0 = all).
expected<dataset_split> load_dataset(std::string_view kind, const std::string& dir, std::int64_t train_samples,
                                     std::uint64_t seed, std::int64_t context = 256);

}  // namespace troupe
