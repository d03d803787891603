// Shared CLI helpers: validators, data options, error printing.
#include "tools/cli_common.hpp"

#include <iostream>

#include "tensor/model_spec.hpp"

namespace troupe::cli {

CLI::Validator model_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        auto spec = parse_model_spec(s);
        return spec ? std::string() : spec.error().message;
      },
      "MODEL");
}

void add_data_options(CLI::App& app, data_options& opts) {
  app.add_option("--dataset", opts.dataset, "Training data")
      ->check(CLI::IsMember({"fashion-mnist", "synthetic"}))
      ->capture_default_str();
  app.add_option("--data", opts.dir, "Directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--train-samples", opts.train_samples, "Use only the first N training samples (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

expected<dataset_split> load_data(const data_options& opts, std::uint64_t seed) {
  auto kind = parse_dataset_kind(opts.dataset);
  if (!kind) return kind.error();
  dataset_split split;
  if (*kind == dataset_kind::synthetic) {
    split = make_synthetic(60000, 10000, seed);  // the sizes of Fashion-MNIST
  } else {
    auto loaded = load_fashion_mnist(opts.dir);
    if (!loaded) return loaded.error();
    split = std::move(*loaded);
  }
  if (opts.train_samples > 0) split.train = head(split.train, opts.train_samples);
  return split;
}

void print_error(const std::string& message) { std::cerr << "troupe: error: " << message << std::endl; }

}  // namespace troupe::cli
