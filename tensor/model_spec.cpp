// Parser for model spec strings.
#include "tensor/model_spec.hpp"

#include <charconv>

namespace troupe {

namespace {

failure bad_spec(std::string_view text, const std::string& why) {
  std::string msg = "invalid model '";
  msg.append(text).append("': ").append(why).append(". Use ").append(model_spec_help).append(".");
  return failure{std::move(msg)};
}

expected<model_spec> parse_mlp(std::string_view text, std::string_view dims) {
  std::vector<std::int64_t> widths;
  while (!dims.empty()) {
    const auto dash = dims.find('-');
    const std::string_view tok = dims.substr(0, dash);
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || ptr != tok.data() + tok.size() || v <= 0 || v > (1 << 24))
      return bad_spec(text, std::string("'").append(tok).append("' is not a layer width (a positive integer)"));
    widths.push_back(v);
    if (dash == std::string_view::npos) break;
    dims.remove_prefix(dash + 1);
    if (dims.empty()) return bad_spec(text, "it ends with '-'");
  }
  if (widths.size() < 2) return bad_spec(text, "an mlp needs at least an input and an output width");
  model_spec spec;
  spec.input_features = widths.front();
  spec.layers.push_back({layer_op::flatten});
  for (std::size_t i = 1; i < widths.size(); ++i) {
    spec.layers.push_back({layer_op::linear, widths[i]});
    if (i + 1 < widths.size()) spec.layers.push_back({layer_op::relu});
  }
  spec.name = "mlp:";
  for (std::size_t i = 0; i < widths.size(); ++i) {
    if (i) spec.name += '-';
    spec.name += std::to_string(widths[i]);
  }
  return spec;
}

model_spec fashion_cnn() {
  model_spec spec;
  spec.name = "cnn:fashion";
  spec.layers = {
      {layer_op::conv2d, 32, 3, 1, 1}, {layer_op::relu}, {layer_op::maxpool2d, 0, 2, 2, 0},
      {layer_op::conv2d, 64, 3, 1, 1}, {layer_op::relu}, {layer_op::maxpool2d, 0, 2, 2, 0},
      {layer_op::flatten},             {layer_op::linear, 128}, {layer_op::relu},
      {layer_op::linear, 10},
  };
  return spec;
}

}  // namespace

expected<model_spec> parse_model_spec(std::string_view text) {
  if (text == "mlp") return parse_mlp(text, "784-256-128-10");
  if (text == "cnn" || text == "cnn:fashion") return fashion_cnn();
  if (text.starts_with("mlp:")) return parse_mlp(text, text.substr(4));
  if (text.starts_with("cnn:")) return bad_spec(text, "the only cnn is cnn:fashion");
  return bad_spec(text, "unknown model family");
}

}  // namespace troupe
