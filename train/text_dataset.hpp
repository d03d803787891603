// Text as a dataset for character-level language models. A UTF-8 text is decoded into
// characters (Unicode code points); the vocabulary is the set of characters it holds,
// sorted, and class k is the k-th. A text's first 90% of characters is the training split
// and the rest the validation split (the `test` split); the fortunes, many collections of
// different kinds, hold out the last 10% of each collection instead. Each split is cut
// into windows of `context` characters that lie end to end: a sample is a window's token
// ids as f32 (context) and its labels are the next character at each position, i32
// (context). Every node that reads the same text gets the same vocabulary and samples.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "train/dataset.hpp"

namespace troupe {

inline constexpr std::string_view default_fortunes_dir = "/usr/share/games/fortunes";  // Debian's `fortunes`
inline constexpr std::int64_t default_context = 256;
inline constexpr double text_train_fraction = 0.9;

struct text_corpus {
  std::vector<std::string> vocabulary;  // each class id's character, as UTF-8
  std::vector<std::int32_t> tokens;     // the text as class ids
};

// The characters of `text`; `what` names it in errors (a path). Fails, naming the byte
// offset, on invalid UTF-8 (a stray continuation byte, a truncated or overlong sequence, a
// surrogate, a code point past U+10FFFF), and on an empty text.
expected<text_corpus> decode_text(std::string_view text, const std::string& what);

// Training samples of `context` characters from corpus tokens [0, cut) and validation
// samples from [cut, end); `held_out` says in errors what the validation split is. Fails
// when either split is shorter than context + 1 characters.
expected<dataset_split> make_text_split(const text_corpus& corpus, std::int64_t cut, std::int64_t context,
                                        const std::string& name, const std::string& held_out);
// The same with the first 90% of the characters for training and the rest for validation.
expected<dataset_split> make_text_split(const text_corpus& corpus, std::int64_t context, const std::string& name);

// A UTF-8 file as a dataset.
expected<dataset_split> load_text_file(const std::string& path, std::int64_t context);

// Every fortune file in dir (regular files, not the .dat indexes), in name order: the
// training split is each file's first 90% in turn, and the validation split the rest of
// each (see fortune_cut).
expected<dataset_split> load_fortunes(const std::string& dir, std::int64_t context);

// Where a fortune file's held-out part starts, in bytes: after the first separator line
// ("%") that ends at or past 90% of the file, so that no fortune is cut in two; the
// file's end when none does.
std::size_t fortune_cut(std::string_view text);

}  // namespace troupe
