// text_report: bits per character and the closing sample of a language model's run.
#include "tools/text_report.hpp"

#include <cmath>
#include <iostream>

#include "tools/cli_common.hpp"
#include "train/text_sampler.hpp"

namespace troupe::cli {

double bits_per_char(double loss_nats) { return loss_nats / std::log(2.0); }

void add_text_output(nlohmann::ordered_json& out, const std::string& who, double validation_loss,
                     const_tensor_view params, const text_output& t) {
  out["validation_bits_per_char"] = round_to(bits_per_char(validation_loss), 4);
  if (t.sample_chars <= 0) return;
  constexpr float temperature = 0.8f;
  const std::string sample = sample_text(*t.net, params, *t.vocabulary, {}, {t.sample_chars, temperature, t.seed});
  std::cerr << who << ": a sample of " << t.sample_chars << " characters (temperature " << temperature << "):\n"
            << sample << "\n";
  out["sample"] = sample;
}

}  // namespace troupe::cli
