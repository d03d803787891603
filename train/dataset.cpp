// Fashion-MNIST loading and normalisation, the synthetic generator, subsets, and the
// choice among them and the texts by name.
#include "train/dataset.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/enum_names.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/random.hpp"
#include "train/idx.hpp"
#include "train/text_dataset.hpp"

namespace troupe {

namespace {

// The names a dataset is chosen by; text is chosen as text:FILE.
constexpr std::array<enum_name<dataset_kind>, 4> dataset_kinds{{{dataset_kind::fashion_mnist, "fashion-mnist"},
                                                                {dataset_kind::synthetic, "synthetic"},
                                                                {dataset_kind::fortunes, "fortunes"},
                                                                {dataset_kind::text, "text"}}};

}  // namespace

expected<dataset_kind> parse_dataset_kind(std::string_view name) {
  if (name.starts_with("text:") && name.size() > 5) return dataset_kind::text;
  if (name != "text")
    if (auto k = parse_in(dataset_kinds, name, "dataset")) return k;
  return failure{"unknown dataset '" + std::string(name) + "'; use fashion-mnist, synthetic, fortunes or text:FILE"};
}

std::string_view name_of(dataset_kind k) { return name_in(dataset_kinds, k); }

namespace {

// Finds base or base.gz in dir.
std::string find_file(const std::string& dir, const std::string& base) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& name : {base + ".gz", base})
    if (fs::is_regular_file(fs::path(dir) / name, ec)) return (fs::path(dir) / name).string();
  return {};
}

struct raw_split {
  idx_array images, labels;
};

expected<raw_split> read_pair(const std::string& dir, const std::string& prefix) {
  const std::string img = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string lab = find_file(dir, prefix + "-labels-idx1-ubyte");
  if (img.empty() || lab.empty()) {
    return failure{"Fashion-MNIST not found in " + dir + ": looked for " + prefix + "-images-idx3-ubyte.gz and " +
                   prefix + "-labels-idx1-ubyte.gz (or the same without .gz). Install it with "
                   "'sudo apt-get install dataset-fashion-mnist', or pass --data DIR pointing at the IDX files."};
  }
  auto images = read_idx(img, 3);
  if (!images) return images.error();
  auto labels = read_idx(lab, 1);
  if (!labels) return labels.error();
  if (images->dims[0] != labels->dims[0])
    return failure{img + " holds " + std::to_string(images->dims[0]) + " images but " + lab + " holds " +
                   std::to_string(labels->dims[0]) + " labels; the pair does not belong together"};
  for (std::uint8_t y : labels->data)
    if (y >= 10) return failure{lab + ": label " + std::to_string(y) + " is outside the 10 Fashion-MNIST classes"};
  return raw_split{std::move(*images), std::move(*labels)};
}

dataset to_dataset(const std::string& name, const raw_split& raw, const fn::normalize_pixel& norm) {
  const std::int64_t n = raw.images.dims[0], h = raw.images.dims[1], w = raw.images.dims[2];
  dataset d;
  d.name = name;
  d.num_classes = 10;
  d.images = tensor({n, 1, h, w});
  d.labels = tensor({n}, dtype::i32);
  float* x = d.images.data<float>();
  for (std::int64_t i = 0, total = n * h * w; i < total; ++i) x[i] = norm(raw.images.data[i]);
  std::int32_t* y = d.labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) y[i] = raw.labels.data[i];
  return d;
}

}  // namespace

expected<dataset_split> load_fashion_mnist(const std::string& dir) {
  auto train = read_pair(dir, "train");
  if (!train) return train.error();
  auto test = read_pair(dir, "t10k");
  if (!test) return test.error();
  if (train->images.dims[1] != test->images.dims[1] || train->images.dims[2] != test->images.dims[2])
    return failure{"train and test images in " + dir + " have different sizes"};
  double sum = 0.0, sq = 0.0;
  for (std::uint8_t v : train->images.data) {
    const double x = v / 255.0;
    sum += x;
    sq += x * x;
  }
  const double count = static_cast<double>(train->images.data.size());
  const double mean = sum / count;
  const double std = std::sqrt(std::max(1e-12, sq / count - mean * mean));
  const fn::normalize_pixel norm{static_cast<float>(mean), static_cast<float>(1.0 / std)};
  dataset_split s;
  s.train = to_dataset("fashion-mnist/train", *train, norm);
  s.test = to_dataset("fashion-mnist/test", *test, norm);
  s.pixel_mean = static_cast<float>(mean);
  s.pixel_std = static_cast<float>(std);
  return s;
}

namespace {

dataset synthetic_part(const std::string& name, const tensor& prototypes, std::int64_t n, std::uint64_t seed) {
  const std::int64_t dim = prototypes.numel() / 10;
  dataset d;
  d.name = name;
  d.num_classes = 10;
  d.images = tensor({n, 1, 28, 28});
  d.labels = tensor({n}, dtype::i32);
  rng r(seed);
  float* x = d.images.data<float>();
  std::int32_t* y = d.labels.data<std::int32_t>();
  const float* proto = prototypes.data<float>();
  for (std::int64_t i = 0; i < n; ++i, x += dim) {
    const auto c = static_cast<std::int32_t>(r.below(10));
    y[i] = c;
    for (std::int64_t j = 0; j < dim; ++j) x[j] = proto[c * dim + j] + r.normal();
  }
  return d;
}

}  // namespace

dataset_split make_synthetic(std::int64_t train_size, std::int64_t test_size, std::uint64_t seed) {
  // Prototypes of amplitude 0.15 per pixel under unit noise: classes overlap per pixel but
  // separate clearly over 784 pixels, so a model must combine many inputs to learn them.
  tensor prototypes({10, 784});
  rng r(derive_seed(seed, {0x5e7}));
  float* p = prototypes.data<float>();
  for (std::int64_t i = 0; i < prototypes.numel(); ++i) p[i] = 0.15f * r.normal();
  dataset_split s;
  s.train = synthetic_part("synthetic/train", prototypes, train_size, derive_seed(seed, {1}));
  s.test = synthetic_part("synthetic/test", prototypes, test_size, derive_seed(seed, {2}));
  return s;
}

dataset head(const dataset& d, std::int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  dataset out;
  out.name = d.name + "[:" + std::to_string(n) + "]";
  out.num_classes = d.num_classes;
  out.images = tensor(d.sample_shape().prepend(n));
  out.labels = tensor(d.labels.sizes().drop_front().prepend(n), dtype::i32);
  copy(out.images, d.images.view().slice(0, n));
  copy(out.labels, d.labels.view().slice(0, n));
  return out;
}

expected<dataset_split> load_dataset(std::string_view kind_name, const std::string& dir, std::int64_t train_samples,
                                     std::uint64_t seed, std::int64_t context) {
  auto kind = parse_dataset_kind(kind_name);
  if (!kind) return kind.error();
  dataset_split split;
  if (*kind == dataset_kind::fortunes || *kind == dataset_kind::text) {
    auto loaded = *kind == dataset_kind::text ? load_text_file(std::string(kind_name.substr(5)), context)
                                              : load_fortunes(std::string(default_fortunes_dir), context);
    if (!loaded) return loaded.error();
    split = std::move(*loaded);
  } else if (*kind == dataset_kind::synthetic) {
    split = make_synthetic(60000, 10000, seed);  // the sizes of Fashion-MNIST
  } else {
    auto loaded = load_fashion_mnist(dir);
    if (!loaded) return loaded.error();
    split = std::move(*loaded);
  }
  if (train_samples > 0) split.train = head(split.train, train_samples);
  return split;
}

}  // namespace troupe
