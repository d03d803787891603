// Tests for train/text_dataset.cpp: characters (not bytes) become sorted class ids, the
// train/validation split and its windows are fixed by the text alone, labels are the next
// character, and bad inputs are refused by name: an empty file, invalid UTF-8 (each kind,
// with its byte offset), a context longer than the validation split, a missing file. A
// fortune file is cut after a whole fortune, and the fortunes hold out the end of each
// file; the ones tools/dev installs load as the default corpus.
#define BOOST_TEST_MODULE text_dataset
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.hpp"
#include "train/text_dataset.hpp"

using namespace troupe;

namespace {

std::string write(const test::temp_dir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// n fortunes "<word> k" of 10 bytes each, separated as fortune files are.
std::string fortunes_of(const std::string& word, int n) {
  std::string s;
  for (int k = 0; k < n; ++k) s += word + " " + std::to_string(k) + "\n%\n";
  return s;
}

// The characters of d's first `windows` samples, as text.
std::string text_of(const dataset& d, const std::vector<std::string>& vocabulary, std::int64_t windows) {
  std::string s;
  const std::int64_t n = windows * d.sample_shape().numel();
  for (std::int64_t i = 0; i < n; ++i) s += vocabulary.at(static_cast<std::size_t>(d.images.data<float>()[i]));
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(characters_become_sorted_class_ids) {
  auto c = decode_text("baé a\xc3\xa9", "t");  // 'é' twice, as two bytes each
  BOOST_REQUIRE_MESSAGE(c.has_value(), (c ? "" : c.error().message));
  BOOST_TEST((c->vocabulary == std::vector<std::string>{" ", "a", "b", "\xc3\xa9"}));
  BOOST_TEST((c->tokens == std::vector<std::int32_t>{2, 1, 3, 0, 1, 3}));
}

BOOST_AUTO_TEST_CASE(invalid_utf8_is_refused_with_its_byte_offset) {
  const std::pair<std::string, std::size_t> bad[] = {
      {"ab\x80", 2},             // a continuation byte where a character starts
      {"abc\xc3", 3},            // truncated at the end
      {"a\xc3(", 1},             // a lead byte without its continuation
      {"a\xc0\xaf", 1},          // overlong '/'
      {"a\xed\xa0\x80", 1},      // a surrogate
      {"a\xf4\x90\x80\x80", 1},  // past U+10FFFF
      {"a\xff", 1},
  };
  for (const auto& [text, at] : bad) {
    auto c = decode_text(text, "sample.txt");
    BOOST_REQUIRE(!c.has_value());
    BOOST_TEST(
        c.error().message.find("sample.txt is not valid UTF-8 at byte " + std::to_string(at)) != std::string::npos,
        c.error().message);
    BOOST_TEST(c.error().message.find("iconv") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(the_split_and_windows_are_fixed_by_the_text) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 7);
  auto c = decode_text(text, "t");
  BOOST_REQUIRE(c.has_value());
  auto s = make_text_split(*c, 4, "seven");
  BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
  // 90 training characters give (90 - 1) / 4 = 22 windows; 10 validation characters 2.
  BOOST_TEST(s->train.size() == 22);
  BOOST_TEST(s->test.size() == 2);
  BOOST_TEST(s->train.num_classes == 7);
  BOOST_TEST(s->train.sample_shape() == (shape{4}));
  BOOST_TEST(s->train.labels_per_sample() == 4);
  BOOST_TEST(s->vocabulary.size() == 7u);
  // Sample 1 is characters 4..7; its labels are characters 5..8.
  for (int p = 0; p < 4; ++p) {
    BOOST_TEST(s->train.images.data<float>()[4 + p] == static_cast<float>((4 + p) % 7));
    BOOST_TEST(s->train.labels.data<std::int32_t>()[4 + p] == (5 + p) % 7);
  }
  // Validation starts at character 90.
  BOOST_TEST(s->test.images.data<float>()[0] == static_cast<float>(90 % 7));
  // A cut of one's own: training [0, 20), validation from 20; either part too short is named.
  auto at = make_text_split(*c, 20, 4, "seven", "the rest");
  BOOST_REQUIRE(at.has_value());
  BOOST_TEST(at->train.size() == 4);
  BOOST_TEST(at->test.images.data<float>()[0] == static_cast<float>(20 % 7));
  auto early = make_text_split(*c, 3, 4, "seven", "the rest");
  BOOST_REQUIRE(!early.has_value());
  BOOST_TEST(early.error().message.find("the training split (3 characters) needs at least 5") != std::string::npos,
             early.error().message);
}

BOOST_AUTO_TEST_CASE(bad_inputs_are_refused_by_name) {
  test::temp_dir dir{"text-dataset"};
  auto empty = load_text_file(write(dir, "empty.txt", ""), 8);
  BOOST_REQUIRE(!empty.has_value());
  BOOST_TEST(empty.error().message.find("empty.txt is empty") != std::string::npos, empty.error().message);

  auto latin1 = load_text_file(write(dir, "latin1.txt", "caf\xe9 au lait"), 2);
  BOOST_REQUIRE(!latin1.has_value());
  BOOST_TEST(latin1.error().message.find("not valid UTF-8 at byte 3") != std::string::npos, latin1.error().message);

  auto short_text = load_text_file(write(dir, "short.txt", std::string(200, 'x')), 64);
  BOOST_REQUIRE(!short_text.has_value());
  BOOST_TEST(short_text.error().message.find("200 characters, too few for a context of 64") != std::string::npos,
             short_text.error().message);
  BOOST_TEST(short_text.error().message.find("Lower --context") != std::string::npos);

  auto missing = load_text_file(dir.file("nowhere.txt"), 8);
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().message.find("cannot read the text") != std::string::npos);

  auto no_fortunes = load_fortunes(dir.file("no-such-dir"), 8);
  BOOST_REQUIRE(!no_fortunes.has_value());
  BOOST_TEST(no_fortunes.error().message.find("apt-get install fortunes") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_fortunes_load_as_the_default_corpus) {
  auto d = load_dataset("fortunes", "", 0, 1, 256);
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  BOOST_TEST(d->train.sample_shape() == (shape{256}));
  BOOST_TEST(d->train.size() > 5000);  // about 2.3 million training characters
  BOOST_TEST(d->test.size() > 500);
  BOOST_TEST(d->train.num_classes == static_cast<std::int64_t>(d->vocabulary.size()));
  BOOST_TEST(d->train.num_classes > 90);
  auto again = load_dataset("fortunes", "", 0, 1, 256);
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(std::equal(d->train.labels.data<std::int32_t>(),
                        d->train.labels.data<std::int32_t>() + d->train.labels.numel(),
                        again->train.labels.data<std::int32_t>()));
  auto text = load_dataset("text:/nonexistent/corpus.txt", "", 0, 1, 256);
  BOOST_REQUIRE(!text.has_value());
  BOOST_TEST(text.error().message.find("/nonexistent/corpus.txt") != std::string::npos);
}

// The held-out part starts after the first separator that ends at or past 90% of the
// file, so a fortune is never cut in two; a file without one is all training.
BOOST_AUTO_TEST_CASE(a_fortune_file_is_cut_after_a_whole_fortune) {
  const std::string ten = fortunes_of("alpha", 10);  // 100 bytes: the 90% point ends fortune 8
  BOOST_TEST(fortune_cut(ten) == 90u);
  BOOST_TEST(ten.substr(90) == "alpha 9\n%\n");
  const std::string longer = fortunes_of("alpha", 8) + "a fortune that runs past the ninety percent mark\n%\nend\n%\n";
  const std::size_t cut = fortune_cut(longer);
  BOOST_TEST(longer.substr(cut) == "end\n%\n");
  BOOST_TEST(fortune_cut("one long fortune without a separator") == 36u);
  BOOST_TEST(fortune_cut("") == 0u);
}

// The training split is each file's head in name order, the validation split each file's
// tail; .dat indexes, links and empty files are skipped; a file that is not UTF-8 is named.
BOOST_AUTO_TEST_CASE(the_fortunes_hold_out_the_end_of_each_file) {
  test::temp_dir dir{"text-fortunes"};
  write(dir, "alpha", fortunes_of("alpha", 10));
  write(dir, "gamma", fortunes_of("gamma", 10));
  write(dir, "alpha.dat", std::string("\x00\x02\xff", 3));
  write(dir, "empty", "");
  std::filesystem::create_symlink(dir.file("alpha"), dir.file("alpha.u8"));
  auto d = load_fortunes(dir.path.string(), 4);
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  // 180 training characters give (180 - 1) / 4 = 44 windows; 20 held out give 4.
  BOOST_TEST(d->train.size() == 44);
  BOOST_TEST(d->test.size() == 4);
  const std::string train = (fortunes_of("alpha", 9) + fortunes_of("gamma", 9)).substr(0, 176);
  BOOST_TEST(text_of(d->train, d->vocabulary, 44) == train);
  BOOST_TEST(text_of(d->test, d->vocabulary, 4) == "alpha 9\n%\ngamma ");
  auto short_context = load_fortunes(dir.path.string(), 32);
  BOOST_REQUIRE(!short_context.has_value());
  BOOST_TEST(short_context.error().message.find("validation split (the last 10% of each file, 20 characters)") !=
                 std::string::npos,
             short_context.error().message);
  write(dir, "latin1", "caf\xe9\n%\n");
  auto bad = load_fortunes(dir.path.string(), 4);
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().message.find(dir.file("latin1") + " is not valid UTF-8 at byte 3") != std::string::npos,
             bad.error().message);
}
