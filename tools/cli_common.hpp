// Pieces every troupe subcommand shares: the command record, exit codes, validators that
// turn tensor/ parse failures into CLI11 errors naming the flag, and dataset loading
// with messages that say what to do.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/expected.hpp"
#include "tensor/backend.hpp"
#include "tensor/gemm.hpp"
#include "train/dataset.hpp"
#include "train/text_dataset.hpp"
#include "train/trainer.hpp"

namespace troupe::cli {

// Exit codes of the troupe binary.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;  // the job ran and failed (diverged, missing data, a dead node...)
inline constexpr int exit_usage = 2;   // the command line or config file is wrong
// A coordinator's job lost a node it cannot go on without (a shard server, every worker)
// or stalled: the job may go on from its last checkpoint (launch restarts it so).
inline constexpr int exit_node_lost = 3;

struct command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};


// Validator for --model: accepts what parse_model_spec accepts.
CLI::Validator model_validator();

// A validator named `name` that accepts the texts `parse` accepts (an expected-returning
// parser of a std::string_view) and refuses the rest with the parser's message.
template <class Parse>
CLI::Validator parsed_by(Parse parse, std::string name) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        auto r = parse(s);
        return r ? std::string() : r.error().message;
      },
      std::move(name));
}

// The model and optimisation options every training command takes. optimizer, schedule,
// adam_betas and init hold the flag text until resolve_train_options() turns them into values.
struct train_options {
  local_train_config train;
  std::string optimizer = "sgd";
  std::string schedule = "cosine";
  std::string adam_betas = "0.9,0.999";
  std::string init = "he";  // --init (Note [Initialisation schemes] in train/model.hpp)
  std::string batch_size = "auto";  // --batch-size: N per worker, or auto (Note [The job's batch])
  std::string device = "cpu";  // --device: cpu, cuda, cuda:N
  bool tf32 = false;           // --tf32: tensor-core TF32 math for GEMMs and convolutions on CUDA
  std::string precision = "fp32";  // --precision: the products' arithmetic (tensor/gemm.hpp)
};
void add_train_options(CLI::App& app, train_options& opts);
// --batch-size N (1 to 2^20), or nothing.
std::optional<std::int64_t> parse_batch_size(const std::string& s);
local_train_config resolve_train_options(const train_options& opts);
// The device --device names (the validator has checked the text).
device chosen_device(const train_options& opts);
// Opens `d` once, so a command fails before it starts anything when the device cannot be
// used; returns the backend's reason (no module, no driver, no device), or nothing.
std::optional<std::string> device_unusable(device d);
// The products' arithmetic --precision names (the validator has checked the text).
precision chosen_precision(const train_options& opts);
// Why --precision cannot go with --device, or --precision or --init with a user's program
// as the workers (launch -- COMMAND), or nothing.
std::optional<std::string> train_options_unfit(const train_options& opts, bool user_program = false);
// "; products in bf16 (ENGINE)" for --precision bf16 (which engine this machine uses,
// tensor/gemm_bf16.hpp); empty for fp32.
std::string describe_precision(const train_options& opts);
// "sgd lr 0.05 (cosine, warm-up 0.5 epochs), momentum 0.9, nesterov on, weight decay 0.0005"
std::string describe(const local_train_config& c);

// The data options every training command takes.
struct data_options {
  std::string dataset = "fashion-mnist";
  std::string dir = std::string(default_fashion_mnist_dir);
  std::int64_t train_samples = 0;  // 0 = all
  std::int64_t context = default_context;  // text datasets: characters a sample
  std::string augment = "none";            // --augment, checked by the parser
  std::int64_t sample_chars = 300;         // text datasets: characters the trained model writes at the end
};
// --augment as the job carries it (name_of(parse_augmentation(...))).
std::string augment_text(const data_options& opts);
void add_data_options(CLI::App& app, data_options& opts);
expected<dataset_split> load_data(const data_options& opts, std::uint64_t seed);

// v rounded to `digits` decimals, for JSON figures people read.
double round_to(double v, int digits);
// v as a command-line value a child process is given ("0.5", "15"; six significant digits).
std::string flag_value(double v);

// Prints a failure on stderr as one "troupe: error: ..." line.
void print_error(const std::string& message);

}  // namespace troupe::cli
