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

void add_config_option(CLI::App& app) {
  app.add_option("--config", "TOML file with any of these flags as keys, e.g. lr = 0.1 (the command line wins)");
}

void apply_config_file(CLI::App& app) {
  const CLI::Option* cfg = app.get_option_no_throw("--config");
  if (!cfg || cfg->count() == 0) return;
  const std::string path = cfg->as<std::string>();
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::FileError&) {
    throw CLI::FileError("--config: cannot read " + path);
  } catch (const CLI::ParseError& e) {
    throw CLI::ConfigError("--config: " + path + " is not valid TOML: " + e.what());
  }
  for (const auto& item : items) {
    if (!item.parents.empty())
      throw CLI::ConfigError("--config: " + path + ": sections such as [" + item.parents.front() +
                             "] are not used; write the flags as top-level keys");
    CLI::Option* opt = app.get_option_no_throw("--" + item.name);
    if (!opt || item.name == "config" || item.name == "help")
      throw CLI::ConfigError("--config: " + path + ": unknown key '" + item.name + "'; the keys are this command's "
                             "flag names without dashes (see " + app.get_name() + " --help)");
    if (opt->count() > 0) continue;  // given on the command line
    opt->add_result(item.inputs);
    opt->run_callback();
  }
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
