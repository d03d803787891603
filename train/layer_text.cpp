// layer_text: one layer's text into its spec and canonical text (Note [Layer lists]).
#include "train/layer_text.hpp"

#include <charconv>
#include <sstream>
#include <utility>

#include "train/layers.hpp"

namespace troupe {

layer_spec spec_of(layer_op op, std::int64_t size, std::int64_t kernel, std::int64_t stride, std::int64_t pad) {
  layer_spec l;
  l.op = op;
  l.size = size;
  l.kernel = kernel;
  l.stride = stride;
  l.pad = pad;
  return l;
}

std::string_view trim(std::string_view t) {
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t' || t.front() == '\r')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t' || t.back() == '\r')) t.remove_suffix(1);
  return t;
}

std::optional<std::int64_t> positive(std::string_view tok, std::int64_t max) {
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  if (ec != std::errc() || ptr != tok.data() + tok.size() || v < 0 || v > max) return std::nullopt;
  return v;
}

std::optional<float> rate(std::string_view tok) {
  float v = 0.f;
  auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  if (ec != std::errc() || ptr != tok.data() + tok.size() || !(v > 0.f && v < 1.f)) return std::nullopt;
  return v;
}

namespace {

using parsed_layer = std::pair<layer_spec, std::string>;

std::vector<std::string_view> words(std::string_view t) {
  std::vector<std::string_view> out;
  while (!(t = trim(t)).empty()) {
    const auto end = t.find_first_of(" \t");
    out.push_back(t.substr(0, end));
    if (end == std::string_view::npos) break;
    t.remove_prefix(end);
  }
  return out;
}

// A layer's name and what follows it: plain arguments and key=value options.
struct layer_words {
  std::string_view op;
  std::vector<std::string_view> plain;
  std::vector<std::pair<std::string_view, std::int64_t>> options;

  // Sets the options this op takes (the others keep their defaults); an option it does
  // not take is refused by name.
  std::optional<failure> take(std::initializer_list<std::pair<std::string_view, std::int64_t*>> known) const {
    for (const auto& [key, value] : options) {
      bool found = false;
      for (const auto& [name, slot] : known)
        if (key == name) {
          *slot = value;
          found = true;
        }
      if (!found) return failure{std::string(op) + " takes no option '" + std::string(key) + "'"};
    }
    return std::nullopt;
  }

  // Its one plain argument, `what`, a positive integer.
  expected<std::int64_t> size(const char* what) const {
    if (plain.size() != 1) return failure{std::string(op) + " needs " + what};
    const auto v = positive(plain.front());
    if (!v || *v == 0) {
      std::string why = "'";
      why.append(plain.front()).append("' is not ").append(what).append(" (a positive integer)");
      return failure{std::move(why)};
    }
    return *v;
  }
};

expected<layer_words> split_layer(std::string_view item) {
  const auto w = words(item);
  if (w.empty()) return failure{"an empty layer"};
  layer_words out;
  out.op = w.front();
  for (std::size_t i = 1; i < w.size(); ++i) {
    const auto eq = w[i].find('=');
    if (eq == std::string_view::npos) {
      out.plain.push_back(w[i]);
      continue;
    }
    const auto v = positive(w[i].substr(eq + 1));
    if (!v) return failure{std::string("'").append(w[i]).append("' needs a whole number after '='")};
    out.options.emplace_back(w[i].substr(0, eq), *v);
  }
  return out;
}

// linear N, linear classes, embedding C, attention H: one size and no options.
expected<parsed_layer> sized_layer(const layer_words& w) {
  if (w.op == "linear" && w.plain.size() == 1 && w.plain.front() == "classes") {
    if (auto bad = w.take({})) return *bad;
    return parsed_layer{spec_of(layer_op::linear, 0), "linear classes"};
  }
  auto n = w.size(w.op == "linear" ? "an output width" : w.op == "embedding" ? "a width" : "a head count");
  if (!n) return n.error();
  if (auto bad = w.take({})) return *bad;
  const layer_op op = w.op == "linear" ? layer_op::linear : w.op == "embedding" ? layer_op::embedding : layer_op::attention;
  return parsed_layer{spec_of(op, *n), std::string(w.op) + " " + std::to_string(*n)};
}

// conv2d C [k=3] [stride=1] [pad=0]; maxpool2d [k=2] [stride=K].
expected<parsed_layer> windowed_layer(const layer_words& w) {
  std::ostringstream canon;
  if (w.op == "conv2d") {
    auto c = w.size("a channel count");
    if (!c) return c.error();
    std::int64_t k = 3, stride = 1, pad = 0;
    if (auto bad = w.take({{"k", &k}, {"stride", &stride}, {"pad", &pad}})) return *bad;
    if (k == 0 || stride == 0) return failure{"conv2d needs k and stride of at least 1"};
    canon << "conv2d " << *c << " k=" << k << " stride=" << stride << " pad=" << pad;
    return parsed_layer{spec_of(layer_op::conv2d, *c, k, stride, pad), canon.str()};
  }
  if (!w.plain.empty()) return failure{"maxpool2d takes only k= and stride="};
  std::int64_t k = 2, stride = 0;
  if (auto bad = w.take({{"k", &k}, {"stride", &stride}})) return *bad;
  if (stride == 0) stride = k;
  if (k == 0) return failure{"maxpool2d needs k of at least 1"};
  canon << "maxpool2d k=" << k << " stride=" << stride;
  return parsed_layer{spec_of(layer_op::maxpool2d, 0, k, stride, 0), canon.str()};
}

// dropout P; relu, gelu, layernorm, batchnorm, flatten.
expected<parsed_layer> unsized_layer(const layer_words& w) {
  layer_spec l;
  if (w.op == "dropout") {
    if (w.plain.size() != 1 || !w.options.empty()) return failure{"dropout needs one rate, as in 'dropout 0.1'"};
    const auto p = rate(w.plain.front());
    if (!p) return failure{"'" + std::string(w.plain.front()) + "' is not a dropout rate (a number between 0 and 1)"};
    l.op = layer_op::dropout;
    l.rate = *p;
    return parsed_layer{l, "dropout " + format_rate(*p)};
  }
  if (!w.plain.empty() || !w.options.empty()) return failure{std::string(w.op) + " takes no arguments"};
  l.op = w.op == "relu"        ? layer_op::relu
         : w.op == "gelu"      ? layer_op::gelu
         : w.op == "layernorm" ? layer_op::layer_norm
         : w.op == "batchnorm" ? layer_op::batch_norm
                               : layer_op::flatten;
  return parsed_layer{l, std::string(w.op)};
}

expected<parsed_layer> parse_layer(std::string_view item);

// "residual(L1, L2, ...)": the block's layers, each as in a list.
expected<std::pair<layer_spec, std::string>> parse_residual(std::string_view body) {
  layer_spec block;
  block.op = layer_op::residual;
  std::string canon = "residual(";
  for (std::size_t i = 0;; ++i) {
    const auto comma = body.find(',');
    const std::string_view part = body.substr(0, comma);
    if (trim(part).starts_with("residual")) return failure{"a residual block cannot hold another"};
    auto l = parse_layer(part);
    if (!l) return failure{"its layer " + std::to_string(i) + " ('" + std::string(trim(part)) + "'): " + l.error().message};
    block.inner.push_back(l->first);
    canon += (i ? ", " : "") + l->second;
    if (comma == std::string_view::npos) break;
    body.remove_prefix(comma + 1);
  }
  return std::make_pair(block, canon + ")");
}

// One layer of a list: the spec and its canonical text, or why not.
expected<parsed_layer> parse_layer(std::string_view item) {
  if (trim(item).starts_with("residual")) {
    const std::string_view t = trim(item);
    const auto open = t.find('(');
    if (open == std::string_view::npos || t.back() != ')' || !trim(t.substr(8, open - 8)).empty())
      return failure{"a residual block is written residual(L1, L2, ...)"};
    return parse_residual(t.substr(open + 1, t.size() - open - 2));
  }
  auto w = split_layer(item);
  if (!w) return w.error();
  const std::string_view op = w->op;
  if (op == "linear" || op == "embedding" || op == "attention") return sized_layer(*w);
  if (op == "conv2d" || op == "maxpool2d") return windowed_layer(*w);
  if (op == "dropout" || op == "relu" || op == "gelu" || op == "layernorm" || op == "batchnorm" || op == "flatten")
    return unsized_layer(*w);
  return failure{"unknown layer '" + std::string(op) + "'"};
}

}  // namespace

expected<model_spec> parse_layer_list(const std::vector<std::string_view>& items,
                                      const std::function<std::string(std::size_t)>& where) {
  model_spec spec;
  spec.name = "layers:";
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto l = parse_layer(items[i]);
    if (!l) return failure{where(i) + " ('" + std::string(trim(items[i])) + "'): " + l.error().message};
    spec.layers.push_back(l->first);
    spec.name += (i ? "; " : "") + l->second;
  }
  if (spec.layers.empty()) return failure{"no layers"};
  return spec;
}

}  // namespace troupe
