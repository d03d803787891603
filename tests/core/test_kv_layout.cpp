// Tests for core/kv_layout.cpp: key names keep integers and strings apart, a key is split
// by whole rows at the big-array bound and its parts balance the shards, the first init
// defines the layout and a second one with another shape is refused naming the key, and
// invalid UTF-8 and empty dimensions are refused.
#define BOOST_TEST_MODULE kv_layout
#include <boost/test/unit_test.hpp>

#include "core/kv_layout.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(integer_and_string_keys_are_different_names) {
  BOOST_TEST(kv_key_name(std::int64_t{3}) != kv_key_name(std::string_view("3")));
  BOOST_TEST(kv_key_display(kv_key_name(std::int64_t{3})) == "3");
  BOOST_TEST(kv_key_display(kv_key_name(std::string_view("fc.w"))) == "\"fc.w\"");
}

BOOST_AUTO_TEST_CASE(utf8_validation) {
  BOOST_TEST(valid_utf8("plain"));
  BOOST_TEST(valid_utf8("gewicht-\xc3\xa4"));          // ä
  BOOST_TEST(valid_utf8("\xf0\x9f\x98\x80"));           // an emoji
  BOOST_TEST(!valid_utf8("\xc3"));                      // truncated
  BOOST_TEST(!valid_utf8("\xff\xfe"));                  // never UTF-8
  BOOST_TEST(!valid_utf8("\xc0\xaf"));                  // overlong '/'
  BOOST_TEST(!valid_utf8("\xed\xa0\x80"));              // a surrogate
}

BOOST_AUTO_TEST_CASE(a_small_key_is_one_part_on_the_least_loaded_shard) {
  kv_registry reg(3, 100);
  auto a = reg.init(kv_key_name(std::int64_t{0}), {10, 5});
  BOOST_REQUIRE(!a.error);
  BOOST_TEST(a.created);
  BOOST_REQUIRE(a.layout->parts.size() == 1u);
  BOOST_TEST(a.layout->parts[0].shard == 0u);
  BOOST_TEST(a.layout->parts[0].numel == 50);
  auto b = reg.init(kv_key_name(std::int64_t{1}), {7});
  BOOST_TEST(b.layout->parts[0].shard == 1u);
  auto c = reg.init(kv_key_name(std::int64_t{2}), {});
  BOOST_TEST(c.layout->parts[0].shard == 2u);
  BOOST_TEST(c.layout->numel() == 1);
}

BOOST_AUTO_TEST_CASE(a_big_key_splits_by_whole_rows_across_shards) {
  kv_registry reg(2, 100);
  auto k = reg.init(kv_key_name(std::string_view("emb")), {25, 30});  // 750 elements, 3 rows per part
  BOOST_REQUIRE(!k.error);
  const auto& parts = k.layout->parts;
  BOOST_TEST(parts.size() == 9u);
  std::int64_t next_row = 0, total = 0;
  for (const auto& p : parts) {
    BOOST_TEST(p.row_begin == next_row);
    BOOST_TEST(p.numel == p.rows * 30);
    BOOST_TEST(p.numel <= 100);
    next_row += p.rows;
    total += p.numel;
  }
  BOOST_TEST(next_row == 25);
  BOOST_TEST(total == 750);
  BOOST_TEST(std::abs(reg.shard_numel()[0] - reg.shard_numel()[1]) <= 90);
  // Part ids name the key and the part.
  BOOST_TEST((parts[4].id >> 16) == k.layout->id);
  BOOST_TEST((parts[4].id & 0xFFFF) == 4u);
  // A row wider than the bound still stays whole.
  auto wide = reg.init(kv_key_name(std::int64_t{9}), {2, 500});
  BOOST_TEST(wide.layout->parts.size() == 2u);
}

BOOST_AUTO_TEST_CASE(the_first_init_defines_and_another_shape_is_refused) {
  kv_registry reg(2, 0);
  const auto name = kv_key_name(std::string_view("w"));
  auto first = reg.init(name, {4, 4});
  auto again = reg.init(name, {4, 4});
  BOOST_TEST(first.created);
  BOOST_TEST(!again.created);
  BOOST_TEST(!again.error);
  BOOST_TEST(again.layout->id == first.layout->id);
  auto other = reg.init(name, {16});
  BOOST_REQUIRE(other.error);
  BOOST_TEST((other.error->code == errc::bad_shape));
  BOOST_TEST(other.error->detail.find("\"w\"") != std::string::npos);
  BOOST_TEST(other.error->detail.find("(4, 4)") != std::string::npos);
  BOOST_TEST(other.error->detail.find("(16,)") != std::string::npos);
  BOOST_TEST(reg.size() == 1u);
}

BOOST_AUTO_TEST_CASE(bad_names_and_shapes_are_refused) {
  kv_registry reg(1, 0);
  auto bad_utf8 = reg.init("s:\xff", {3});
  BOOST_REQUIRE(bad_utf8.error);
  BOOST_TEST(bad_utf8.error->detail.find("UTF-8") != std::string::npos);
  auto zero = reg.init(kv_key_name(std::int64_t{1}), {3, 0});
  BOOST_REQUIRE(zero.error);
  BOOST_TEST((zero.error->code == errc::bad_shape));
  BOOST_TEST(reg.size() == 0u);
}

BOOST_AUTO_TEST_CASE(parts_and_rows_stay_within_one_message) {
  kv_registry reg(2, std::int64_t{1} << 40);  // a bound above the message limit is lowered to it
  auto big = reg.init(kv_key_name(std::int64_t{1}), {3 * (kv_max_message_floats / 1024), 1024});
  BOOST_REQUIRE(!big.error);
  BOOST_TEST(big.layout->parts.size() == 3u);
  for (const auto& p : big.layout->parts) BOOST_TEST(p.numel <= kv_max_message_floats);
  auto wide = reg.init(kv_key_name(std::int64_t{2}), {2, kv_max_message_floats + 1});
  BOOST_REQUIRE(wide.error);
  BOOST_TEST(wide.error->detail.find("reshape") != std::string::npos);
}
