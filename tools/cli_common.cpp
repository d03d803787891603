// Shared CLI helpers: validators, data options, error printing.
#include "tools/cli_common.hpp"

#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "tensor/gemm_bf16.hpp"
#include "train/augment.hpp"
#include "train/model_spec.hpp"

namespace troupe::cli {

// A `file:PATH` model becomes the `layers:` text of its lines here, so the spec every node
// receives is the text and no node needs the file.
CLI::Validator model_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.starts_with("file:")) {
          auto text = model_spec_from_file(s.substr(5));
          if (!text) return text.error().message;
          s = *text;
        }
        auto spec = parse_model_spec(s);
        return spec ? std::string() : spec.error().message;
      },
      "MODEL");
}

void add_train_options(CLI::App& app, train_options& o) {
  app.add_option("--model", o.train.model, std::string("Model: ") + std::string(model_spec_help))
      ->transform(model_validator())
      ->capture_default_str();
  app.add_option("--epochs", o.train.epochs, "Passes over the training set")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size,
                 "Samples per step per worker, 1 to 1048576, or auto: 128 for one worker; with several, the job's "
                 "batch split over them (256 a round in sync, 128 pushes' worth in async and ssp, shrinking as 8/N "
                 "past 8 workers)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return s == "auto" || parse_batch_size(s) ? std::string()
                                                      : "'" + s +
                                                            "' is not a batch: give auto or a whole number "
                                                            "from 1 to 1048576";
          },
          "N|auto"))
      ->capture_default_str();
  app.add_option("--lr", o.train.lr, "Peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--momentum", o.train.optimizer.momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 0.9999))
      ->capture_default_str();
  app.add_option("--weight-decay", o.train.optimizer.weight_decay, "L2 weight decay")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_flag("--nesterov,!--no-nesterov", o.train.optimizer.nesterov, "Nesterov momentum (sgd)")
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer,
                 "Optimizer: sgd (with --momentum), adam, or adamw (Adam with decoupled --weight-decay)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  app.add_option("--adam-betas", o.adam_betas,
                 "adam and adamw: the decays of the gradient's running mean and of its square, as B1,B2 (PyTorch's "
                 "betas)")
      ->check(parsed_by(parse_adam_betas, "B1,B2"))
      ->capture_default_str();
  app.add_option("--lr-schedule", o.schedule, "Learning-rate schedule after warm-up")
      ->check(CLI::IsMember({"constant", "cosine", "linear"}))
      ->capture_default_str();
  app.add_option("--warmup-epochs", o.train.warmup_epochs, "Linear warm-up length in epochs")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  app.add_option("--seed", o.train.seed, "Seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--init", o.init,
                 "How linear, convolution and attention layers start: he (He's normal before ReLU and GELU, Xavier "
                 "before the rest, zero biases) or pytorch (PyTorch's defaults: weights and biases uniform in "
                 "+-1/sqrt(fan_in), for comparing with a PyTorch model or steadier first steps at a high --lr)")
      ->check(parsed_by(parse_init_scheme, "he|pytorch"))
      ->capture_default_str();
  app.add_option("--device", o.device, "Where workers compute: cpu, cuda or cuda:N")
      ->check(parsed_by(parse_device, "DEVICE"))
      ->capture_default_str();
  app.add_flag("--tf32", o.tf32, "On CUDA: TF32 tensor-core math for GEMMs and convolutions (faster, ~1e-3 relative)");
  app.add_option("--precision", o.precision,
                 "On the CPU: bf16 multiplies weights and activations as bfloat16 with fp32 sums (master weights, "
                 "optimizer and gradients stay fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
}

precision chosen_precision(const train_options& o) { return *precision_from_name(o.precision); }

std::optional<std::string> train_options_unfit(const train_options& o, bool user_program) {
  if (user_program && o.init != "he")
    return "--init " + o.init +
           " sets how Troupe's own models start; the program after -- initialises its model as it chooses. "
           "Drop --init";
  if (chosen_precision(o) == precision::fp32) return std::nullopt;
  if (user_program)
    return "--precision " + o.precision +
           " sets the arithmetic of Troupe's own workers; the program after -- "
           "computes as it chooses (torch.autocast, for one). Drop --precision";
  if (chosen_device(o).kind == device_kind::cpu) return std::nullopt;
  return "--precision " + o.precision + " computes on the CPU only, and --device " + o.device +
         " was asked for; drop --precision, or use --tf32 for faster products on CUDA";
}

std::string describe_precision(const train_options& o) {
  if (chosen_precision(o) == precision::fp32) return {};
  return "; products in " + o.precision + " (" + std::string(name_of(bf16_engine_in_use())) + ")";
}

device chosen_device(const train_options& o) { return *parse_device(o.device); }

std::optional<std::string> device_unusable(device d) {
  if (d.kind == device_kind::cpu) return std::nullopt;
  auto b = backend_context::open(d);
  if (!b) return "--device " + to_string(d) + ": " + b.error().message;
  return std::nullopt;
}

std::optional<std::int64_t> parse_batch_size(const std::string& s) {
  if (s.empty() || s.size() > 7 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const std::int64_t n = std::stoll(s);
  if (n < 1 || n > (1 << 20)) return std::nullopt;
  return n;
}

local_train_config resolve_train_options(const train_options& o) {
  local_train_config cfg = o.train;
  // One worker's batch: auto is the reference batch (Note [The job's batch]).
  cfg.batch_size = o.batch_size == "auto" ? reference_batch : *parse_batch_size(o.batch_size);
  // Both names were checked by the IsMember validators above.
  cfg.optimizer.kind = *parse_optimizer_kind(o.optimizer);
  const adam_betas betas = *parse_adam_betas(o.adam_betas);  // checked by its validator
  cfg.optimizer.beta1 = betas.beta1;
  cfg.optimizer.beta2 = betas.beta2;
  cfg.init = *parse_init_scheme(o.init);  // checked by its validator
  cfg.schedule = *parse_lr_schedule_kind(o.schedule);
  return cfg;
}

std::string describe(const local_train_config& c) {
  std::ostringstream s;
  s << name_of(c.optimizer.kind) << " lr " << c.lr << " (" << name_of(c.schedule) << ", warm-up " << c.warmup_epochs
    << " epochs)";
  if (c.optimizer.kind == optimizer_kind::sgd)
    s << ", momentum " << c.optimizer.momentum << ", nesterov " << (c.optimizer.nesterov ? "on" : "off");
  else
    s << ", betas " << c.optimizer.beta1 << "," << c.optimizer.beta2;
  s << ", weight decay " << c.optimizer.weight_decay;
  if (c.augment != "none") s << ", augment " << c.augment;
  if (c.init != init_scheme::he) s << ", init " << name_of(c.init);
  return s.str();
}

void add_data_options(CLI::App& app, data_options& opts) {
  app.add_option("--dataset", opts.dataset,
                 "Training data: fashion-mnist, synthetic, fortunes (Debian's fortune texts) or text:FILE (any UTF-8 "
                 "text), the texts for character-level models such as gpt")
      ->check(parsed_by(parse_dataset_kind, "DATASET"))
      ->capture_default_str();
  app.add_option("--context", opts.context, "Text datasets: characters a sample holds (the model's context)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--sample", opts.sample_chars,
                 "Text datasets: characters the trained model writes at the end (0: none)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option("--augment", opts.augment,
                 "Training samples: none; for images any of crop (shifts by up to 2 pixels, crop=N by up to N), flip "
                 "(mirrors half the images), separated by commas, drawn from the seed, epoch and sample; for a text "
                 "shift (each epoch starts the windows at a new offset, drawn from the seed and epoch)")
      ->check(parsed_by(parse_augmentation, "AUGMENT"))
      ->capture_default_str();
  app.add_option("--data", opts.dir, "Directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--train-samples", opts.train_samples, "Use only the first N training samples (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

std::string augment_text(const data_options& opts) {
  auto a = parse_augmentation(opts.augment);
  return a ? name_of(*a) : opts.augment;  // the parser refused a bad one already
}

expected<dataset_split> load_data(const data_options& opts, std::uint64_t seed) {
  return load_dataset(opts.dataset, opts.dir, opts.train_samples, seed, opts.context);
}

double round_to(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

std::string flag_value(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void print_error(const std::string& message) { std::cerr << "troupe: error: " << message << std::endl; }

}  // namespace troupe::cli
