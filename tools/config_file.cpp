// config_file: --config read with toml++, checked key by key against the command's
// options, and options written back as TOML.
#include "tools/config_file.hpp"

#include <toml++/toml.h>

#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace troupe::cli {

namespace {

enum class wants { flag, integer, number, text };

// What an option takes, from CLI11's own description of it ("INT", "UINT:INT in [1 - 4]",
// "FLOAT", "TEXT", ...; a flag takes no value).
wants what_option_takes(const CLI::Option& opt) {
  if (opt.get_expected_max() == 0) return wants::flag;
  const std::string type = opt.get_type_name();
  if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) return wants::integer;
  if (type.rfind("FLOAT", 0) == 0) return wants::number;
  return wants::text;
}

const char* described(wants w) {
  switch (w) {
    case wants::flag: return "true or false";
    case wants::integer: return "an integer";
    case wants::number: return "a number";
    case wants::text: return "a string";
  }
  return "";
}

const char* toml_type(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

std::string where(const std::string& path, const toml::source_region& at) {
  return path + ":" + std::to_string(at.begin.line) + ":" + std::to_string(at.begin.column);
}

std::string number_text(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// "12", "-0.5", "1e-3": what TOML reads as a number (not "inf", "nan", "0x10" or "1.").
bool is_plain_number(const std::string& v) {
  double parsed = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), parsed);
  if (ec != std::errc() || end != v.data() + v.size()) return false;
  const std::size_t digits = v.front() == '-' || v.front() == '+' ? 1 : 0;
  if (v.size() <= digits || !std::isdigit(static_cast<unsigned char>(v[digits]))) return false;
  for (std::size_t i = 0; i + 1 < v.size(); ++i)
    if (v[i] == '.' && !std::isdigit(static_cast<unsigned char>(v[i + 1]))) return false;
  if (v.back() == '.') return false;
  for (char c : v)
    if (std::isalpha(static_cast<unsigned char>(c)) && c != 'e' && c != 'E') return false;
  return true;
}

// The command-line text for one TOML value of an option that takes `w`, or nullopt when
// the value's type does not fit.
std::optional<std::string> as_argument(const toml::node& n, wants w) {
  if (auto b = n.as_boolean()) {
    if (w == wants::flag) return b->get() ? "true" : "false";
    return std::nullopt;
  }
  if (w == wants::flag) return std::nullopt;
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto f = n.as_floating_point()) {
    if (w == wants::integer) return std::nullopt;
    return number_text(f->get());
  }
  if (auto s = n.as_string()) {
    if (w != wants::text) return std::nullopt;
    return s->get();
  }
  return std::nullopt;
}

}  // namespace

void add_config_option(CLI::App& app) {
  app.add_option("--config", "TOML file with any of these flags as keys, e.g. lr = 0.1 (the command line wins)");
}

void apply_config_file(CLI::App& app) {
  const CLI::Option* cfg = app.get_option_no_throw("--config");
  if (!cfg || cfg->count() == 0) return;
  const std::string path = cfg->as<std::string>();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw CLI::FileError("--config: " + path +
                         (std::filesystem::exists(path, ec) ? " is not a file; give a TOML file" : ": no such file"));
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) throw CLI::FileError("--config: cannot read " + path);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw CLI::ConfigError("--config: " + where(path, e.source()) + ": not valid TOML: " + std::string(e.description()));
  }
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    const std::string at = where(path, key.source());
    if (value.is_table())
      throw CLI::ConfigError("--config: " + at + ": sections such as [" + name +
                             "] are not used; write the flags as top-level keys");
    CLI::Option* opt = app.get_option_no_throw("--" + name);
    if (!opt || name == "config" || name == "help" || name == "version")
      throw CLI::ConfigError("--config: " + at + ": unknown key '" + name + "'; the keys are this command's flag names "
                             "without dashes (see " + app.get_name() + " --help)");
    if (opt->count() > 0) continue;  // given on the command line
    const wants w = what_option_takes(*opt);
    std::vector<std::string> args;
    auto take = [&](const toml::node& n) {
      auto arg = as_argument(n, w);
      if (!arg)
        throw CLI::ConfigError("--config: " + at + ": '" + name + "' takes " + described(w) + ", not " + toml_type(n) +
                               (w == wants::flag ? "; write " + name + " = true or " + name + " = false" : ""));
      args.push_back(std::move(*arg));
    };
    if (const toml::array* list = value.as_array()) {
      if (opt->get_expected_max() <= 1)
        throw CLI::ConfigError("--config: " + at + ": '" + name + "' takes one value, not an array");
      for (const auto& n : *list) take(n);
    } else {
      take(value);
    }
    opt->add_result(args);
    try {
      opt->run_callback();
    } catch (const CLI::ParseError& e) {  // the option's own check: a range, a set of names
      throw CLI::ConfigError("--config: " + at + ": " + e.what());
    }
  }
}

std::string toml_line(const CLI::Option& opt) {
  if (opt.count() == 0) return {};
  const wants w = what_option_takes(opt);
  auto value = [&](const std::string& v) -> std::string {
    if (w == wants::flag && (v == "true" || v == "false")) return v;
    if ((w == wants::integer || w == wants::number) && is_plain_number(v)) return v;
    std::string quoted = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    return quoted + "\"";
  };
  const auto& results = opt.results();
  std::string out = opt.get_single_name() + " = ";
  if (results.size() == 1) return out + value(results.front()) + "\n";
  out += "[";
  for (std::size_t i = 0; i < results.size(); ++i) out += (i ? ", " : "") + value(results[i]);
  return out + "]\n";
}

}  // namespace troupe::cli
