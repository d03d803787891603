// text_report: what a run of a character-level language model reports besides accuracy
// (train-local, train, a coordinator node and evaluate alike): the validation loss in bits
// per character, and a sample of the text the trained model writes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "train/model.hpp"

namespace troupe::cli {

// The validation loss (mean cross-entropy in nats a character) in bits per character.
double bits_per_char(double loss_nats);

// A trained language model and what it is asked to write.
struct text_output {
  const model* net = nullptr;
  const std::vector<std::string>* vocabulary = nullptr;  // the text's characters, by class id
  std::int64_t sample_chars = 300;  // 0: no sample
  std::uint64_t seed = 1;           // draws the sample's characters
};

// Adds "validation_bits_per_char" to `out` and, unless sample_chars is 0, "sample": the
// text `params` (host memory of t.net's layout) writes at temperature 0.8, which is also
// printed on stderr after `who`'s name.
void add_text_output(nlohmann::ordered_json& out, const std::string& who, double validation_loss,
                     const_tensor_view params, const text_output& t);

}  // namespace troupe::cli
