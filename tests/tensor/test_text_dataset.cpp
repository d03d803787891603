// Tests for tensor/text_dataset.cpp: characters (not bytes) become sorted class ids, the
// train/validation split and its windows are fixed by the text alone, labels are the next
// character, and bad inputs are refused by name: an empty file, invalid UTF-8 (each kind,
// with its byte offset), a context longer than the validation split, a missing file. The
// fortunes that tools/dev installs load as the default corpus.
#define BOOST_TEST_MODULE text_dataset
#include <boost/test/unit_test.hpp>

#include <fstream>

#include "tensor/text_dataset.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;

namespace {

std::string write(const test::temp_dir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
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
      {"ab\x80", 2},              // a continuation byte where a character starts
      {"abc\xc3", 3},             // truncated at the end
      {"a\xc3(", 1},              // a lead byte without its continuation
      {"a\xc0\xaf", 1},           // overlong '/'
      {"a\xed\xa0\x80", 1},       // a surrogate
      {"a\xf4\x90\x80\x80", 1},   // past U+10FFFF
      {"a\xff", 1},
  };
  for (const auto& [text, at] : bad) {
    auto c = decode_text(text, "sample.txt");
    BOOST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().message.find("sample.txt is not valid UTF-8 at byte " + std::to_string(at)) !=
                   std::string::npos,
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
