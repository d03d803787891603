// UTF-8 decoding, the vocabulary, and the train/validation windows of a text.
#include "train/text_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace troupe {

namespace {

// The code point at text[i], advancing i past it, or -1 when the bytes there are not UTF-8.
std::int64_t next_code_point(std::string_view text, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  int extra = 0;
  std::int64_t cp = 0, min = 0;
  if (b0 < 0x80) {
    ++i;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    extra = 1, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3, cp = b0 & 0x07, min = 0x10000;
  } else {
    return -1;  // a continuation byte where a character should start, or 0xF8..0xFF
  }
  if (i + extra >= text.size()) return -1;  // truncated at the end
  for (int k = 1; k <= extra; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;  // overlong, too large, surrogate
  i += extra + 1;
  return cp;
}

std::string encode(std::int64_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Windows [k * context, (k + 1) * context) of tokens[begin, end), labels shifted by one.
dataset windows(const std::string& name, const text_corpus& c, std::size_t begin, std::size_t end,
                std::int64_t context) {
  const std::int64_t n = (static_cast<std::int64_t>(end - begin) - 1) / context;
  dataset d;
  d.name = name;
  d.num_classes = static_cast<std::int64_t>(c.vocabulary.size());
  d.images = tensor({n, context});
  d.labels = tensor({n, context}, dtype::i32);
  float* x = d.images.data<float>();
  std::int32_t* y = d.labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < n * context; ++i) {
    x[i] = static_cast<float>(c.tokens[begin + static_cast<std::size_t>(i)]);
    y[i] = c.tokens[begin + static_cast<std::size_t>(i) + 1];
  }
  return d;
}

// "10%": what a split holds out.
std::string held_out_share() { return std::to_string(std::lround((1 - text_train_fraction) * 100)) + "%"; }

expected<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return failure{"cannot read the text " + path + ": check the path and its permissions"};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The code points of text, or where it stops being UTF-8; `what` names it in the error.
expected<std::vector<std::int64_t>> code_points_of(std::string_view text, const std::string& what) {
  std::vector<std::int64_t> code_points;
  code_points.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t at = i;
    const std::int64_t cp = next_code_point(text, i);
    if (cp < 0)
      return failure{what + " is not valid UTF-8 at byte " + std::to_string(at) +
                     "; convert it first, for example with iconv -f latin1 -t utf-8"};
    code_points.push_back(cp);
  }
  return code_points;
}

// The vocabulary (the distinct code points, sorted) and each code point's class id.
text_corpus corpus_of(const std::vector<std::int64_t>& code_points) {
  std::vector<std::int64_t> chars = code_points;
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  text_corpus c;
  std::map<std::int64_t, std::int32_t> id;
  for (std::int64_t cp : chars) {
    id.emplace(cp, static_cast<std::int32_t>(c.vocabulary.size()));
    c.vocabulary.push_back(encode(cp));
  }
  c.tokens.reserve(code_points.size());
  for (std::int64_t cp : code_points) c.tokens.push_back(id.at(cp));
  return c;
}

}  // namespace

expected<text_corpus> decode_text(std::string_view text, const std::string& what) {
  if (text.empty()) return failure{what + " is empty: a text dataset needs a UTF-8 text to learn from"};
  auto code_points = code_points_of(text, what);
  if (!code_points) return code_points.error();
  return corpus_of(*code_points);
}

expected<dataset_split> make_text_split(const text_corpus& corpus, std::int64_t cut, std::int64_t context,
                                        const std::string& name, const std::string& held_out) {
  const auto n = static_cast<std::int64_t>(corpus.tokens.size());
  if (context <= 0) return failure{"the context must be at least 1 character, got " + std::to_string(context)};
  TROUPE_CHECK(cut >= 0 && cut <= n, "make_text_split: the cut must lie within the text");
  const auto too_few = [&](const std::string& split) {
    return failure{name + " has " + std::to_string(n) + " characters, too few for a context of " +
                   std::to_string(context) + ": the " + split + " needs at least " + std::to_string(context + 1) +
                   ". Lower --context or use a longer text"};
  };
  if (n - cut < context + 1)
    return too_few("validation split (" + held_out + ", " + std::to_string(n - cut) + " characters)");
  if (cut < context + 1) return too_few("training split (" + std::to_string(cut) + " characters)");
  dataset_split s;
  s.train = windows(name + "/train", corpus, 0, static_cast<std::size_t>(cut), context);
  s.test = windows(name + "/validation", corpus, static_cast<std::size_t>(cut), static_cast<std::size_t>(n), context);
  s.vocabulary = corpus.vocabulary;
  return s;
}

expected<dataset_split> make_text_split(const text_corpus& corpus, std::int64_t context, const std::string& name) {
  const auto n = static_cast<std::int64_t>(corpus.tokens.size());
  const auto cut = static_cast<std::int64_t>(static_cast<double>(n) * text_train_fraction);
  return make_text_split(corpus, cut, context, name, "the last " + held_out_share());
}

expected<dataset_split> load_text_file(const std::string& path, std::int64_t context) {
  auto text = read_file(path);
  if (!text) return text.error();
  auto corpus = decode_text(*text, path);
  if (!corpus) return corpus.error();
  return make_text_split(*corpus, context, "text:" + path);
}

expected<dataset_split> load_fortunes(const std::string& dir, std::int64_t context) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && !it->is_symlink(ec) && it->path().extension() != ".dat") files.push_back(it->path());
  if (files.empty())
    return failure{"no fortune files in " + dir +
                   ": install them with 'apt-get install fortunes', or give a text "
                   "with --dataset text:FILE"};
  std::sort(files.begin(), files.end());
  std::vector<std::int64_t> train, held_out;  // code points
  for (const auto& f : files) {
    auto text = read_file(f.string());
    if (!text) return text.error();
    auto code_points = code_points_of(*text, f.string());
    if (!code_points) return code_points.error();
    // The file is valid UTF-8 and cut after an ASCII separator, so its head's characters
    // are the head's bytes that do not continue a character.
    const std::size_t cut = fortune_cut(*text);
    const auto head = std::count_if(text->begin(), text->begin() + static_cast<std::ptrdiff_t>(cut),
                                    [](char b) { return (b & 0xC0) != 0x80; });
    train.insert(train.end(), code_points->begin(), code_points->begin() + head);
    held_out.insert(held_out.end(), code_points->begin() + head, code_points->end());
  }
  const auto train_chars = static_cast<std::int64_t>(train.size());
  train.insert(train.end(), held_out.begin(), held_out.end());
  if (train.empty())
    return failure{"the fortunes in " + dir + " is empty: a text dataset needs a UTF-8 text to learn from"};
  return make_text_split(corpus_of(train), train_chars, context, "fortunes",
                         "the last " + held_out_share() + " of each file");
}

std::size_t fortune_cut(std::string_view text) {
  const auto from = static_cast<std::size_t>(static_cast<double>(text.size()) * text_train_fraction);
  // A separator is "%" alone on its line, after a fortune.
  const std::size_t at = text.find("\n%\n", from < 3 ? 0 : from - 3);
  return at == std::string_view::npos ? text.size() : at + 3;
}

}  // namespace troupe
