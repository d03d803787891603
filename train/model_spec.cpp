// model_spec: model spec strings (mlp, cnn, resnet, gpt, layers:, a model file) into
// specs; a layer list's text is layer_text's.
#include "train/model_spec.hpp"

#include <charconv>
#include <fstream>

#include "train/layer_text.hpp"
#include "train/layers.hpp"

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
  spec.layers.push_back(spec_of(layer_op::flatten));
  for (std::size_t i = 1; i < widths.size(); ++i) {
    spec.layers.push_back(spec_of(layer_op::linear, widths[i]));
    if (i + 1 < widths.size()) spec.layers.push_back(spec_of(layer_op::relu));
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
      spec_of(layer_op::conv2d, 32, 3, 1, 1), spec_of(layer_op::relu), spec_of(layer_op::maxpool2d, 0, 2, 2, 0),
      spec_of(layer_op::conv2d, 64, 3, 1, 1), spec_of(layer_op::relu), spec_of(layer_op::maxpool2d, 0, 2, 2, 0),
      spec_of(layer_op::flatten),             spec_of(layer_op::linear, 128), spec_of(layer_op::relu),
      spec_of(layer_op::linear, 10),
  };
  return spec;
}



expected<model_spec> parse_layers(std::string_view text, std::string_view list) {
  std::vector<std::string_view> items;
  for (;;) {
    const auto semi = list.find(';');
    items.push_back(list.substr(0, semi));
    if (semi == std::string_view::npos) break;
    list.remove_prefix(semi + 1);
  }
  if (items.size() > 1 && trim(items.back()).empty()) items.pop_back();  // a trailing ';'
  auto spec = parse_layer_list(items, [](std::size_t i) { return "layer " + std::to_string(i); });
  if (!spec) return bad_spec(text, spec.error().message);
  return spec;
}

// Note [The gpt model]
// gpt:layers=L,dim=C,heads=H (defaults 6, 384 and 6: about 10.7M parameters over a
// 100-character vocabulary and a context of 256) is GPT-2's decoder-only shape written as
// a layer list:
//   embedding C
//   L times: residual(layernorm, attention H)
//            residual(layernorm, linear 4C, gelu, linear C)
//   layernorm; linear classes
// (pre-norm blocks, the output layer not tied to the embedding). With dropout=P (0:
// none, the default) a `dropout P` follows the embedding and ends each block's branch,
// where GPT-2 drops. The context and the vocabulary come from the dataset, so one spec
// serves any text.

expected<model_spec> parse_gpt(std::string_view text, std::string_view args) {
  std::int64_t layers = 6, dim = 384, heads = 6;
  float dropout = 0.f;
  while (!args.empty()) {
    const auto comma = args.find(',');
    const std::string_view item = args.substr(0, comma);
    const auto eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    if (key == "dropout" && eq != std::string_view::npos) {
      const std::string_view value = item.substr(eq + 1);
      const auto p = value == "0" ? std::optional<float>(0.f) : rate(value);
      if (!p) return bad_spec(text, "'" + std::string(item) + "' needs a rate from 0 up to (not including) 1");
      dropout = *p;
      if (comma == std::string_view::npos) break;
      args.remove_prefix(comma + 1);
      continue;
    }
    std::int64_t* slot = key == "layers" ? &layers : key == "dim" ? &dim : key == "heads" ? &heads : nullptr;
    if (!slot || eq == std::string_view::npos)
      return bad_spec(text, "'" + std::string(item) + "' is not one of layers=L, dim=C, heads=H, dropout=P");
    const auto v = positive(item.substr(eq + 1), 1 << 16);
    if (!v || *v == 0) return bad_spec(text, "'" + std::string(item) + "' needs a positive whole number");
    *slot = *v;
    if (comma == std::string_view::npos) break;
    args.remove_prefix(comma + 1);
  }
  if (dim % heads != 0)
    return bad_spec(text, "dim=" + std::to_string(dim) + " is not a multiple of heads=" + std::to_string(heads));
  const std::string drop = dropout > 0.f ? "dropout " + format_rate(dropout) : "";
  std::string list = "embedding " + std::to_string(dim) + (drop.empty() ? "" : "; " + drop);
  const std::string branch_end = drop.empty() ? ")" : ", " + drop + ")";
  for (std::int64_t i = 0; i < layers; ++i)
    list += "; residual(layernorm, attention " + std::to_string(heads) + branch_end + "; residual(layernorm, linear " +
            std::to_string(4 * dim) + ", gelu, linear " + std::to_string(dim) + branch_end;
  list += "; layernorm; linear classes";
  auto spec = parse_layers(list, list);
  if (!spec) return spec.error();
  spec->name = "gpt:layers=" + std::to_string(layers) + ",dim=" + std::to_string(dim) + ",heads=" + std::to_string(heads) +
               (drop.empty() ? "" : ",dropout=" + format_rate(dropout));
  return spec;
}

// Note [The resnet model]
// resnet:width=W (default 32) is a small residual CNN for 28 x 28 images, two stages of
// W and 2W channels, each a convolution and a basic block (He et al. 2016) then 2 x 2
// max pooling:
//   conv2d W pad=1; batchnorm; relu
//   residual(conv2d W pad=1, batchnorm, relu, conv2d W pad=1, batchnorm); relu; maxpool2d
//   conv2d 2W pad=1; batchnorm; relu
//   residual(conv2d 2W pad=1, batchnorm, relu, conv2d 2W pad=1, batchnorm); relu; maxpool2d
//   flatten; linear classes
// (the ReLU after each block's sum is a layer of its own; the blocks keep their shape,
// so no projection shortcut is needed). At train-local's defaults it reaches issue 19's
// 92.5% on Fashion-MNIST in 5 epochs (tools/bench/resnet).

expected<model_spec> parse_resnet(std::string_view text, std::string_view args) {
  const auto v = args.starts_with("width=") ? positive(args.substr(6), 1024) : std::nullopt;
  if (!v || *v == 0)
    return bad_spec(text, std::string("'").append(args).append("' is not width=W (a whole number from 1 to 1024)"));
  const std::int64_t width = *v;
  const std::string w = std::to_string(width), w2 = std::to_string(2 * width);
  auto stage = [](const std::string& c) {
    return "conv2d " + c + " pad=1; batchnorm; relu; residual(conv2d " + c + " pad=1, batchnorm, relu, conv2d " + c +
           " pad=1, batchnorm); relu; maxpool2d";
  };
  const std::string list = stage(w) + "; " + stage(w2) + "; flatten; linear classes";
  auto spec = parse_layers(list, list);
  if (!spec) return spec.error();
  spec->name = "resnet:width=" + w;
  return spec;
}

}  // namespace

expected<std::string> model_spec_from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return failure{"cannot read the model file " + path + ": check the path and its permissions"};
  std::vector<std::string> lines;
  std::vector<std::size_t> line_no;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    if (trim(line).empty()) continue;
    if (line.find(';') != std::string::npos)
      return failure{"model file " + path + ", line " + std::to_string(n) + ": one layer a line, without ';'"};
    lines.push_back(line);
    line_no.push_back(n);
  }
  std::vector<std::string_view> items(lines.begin(), lines.end());
  auto spec = parse_layer_list(items, [&](std::size_t i) { return "line " + std::to_string(line_no[i]); });
  if (!spec) return failure{"model file " + path + ", " + spec.error().message};
  return spec->name;
}

expected<model_spec> parse_model_spec(std::string_view text) {
  if (text == "mlp") return parse_mlp(text, "784-256-128-10");
  if (text == "resnet") return parse_resnet(text, "width=32");
  if (text.starts_with("resnet:")) return parse_resnet(text, text.substr(7));
  if (text == "cnn" || text == "cnn:fashion") return fashion_cnn();
  if (text.starts_with("mlp:")) return parse_mlp(text, text.substr(4));
  if (text.starts_with("layers:")) return parse_layers(text, text.substr(7));
  if (text == "gpt") return parse_gpt(text, "");
  if (text.starts_with("gpt:")) return parse_gpt(text, text.substr(4));
  if (text.starts_with("cnn:")) return bad_spec(text, "the only cnn is cnn:fashion");
  if (text.starts_with("file:"))
    return bad_spec(text, "a model file is read where the command line is parsed; pass its layers as layers:...");
  return bad_spec(text, "unknown model family");
}

}  // namespace troupe
