// Tests for core/gradient_buckets.cpp: the cut of a list (each bucket closed once it holds
// the asked bytes, a last one with no bytes joined to the one before, 0: each alone);
// buckets are cut at layer boundaries from the top,
// hold at least the asked bytes (the lowest may hold less), cover the stage's parameters
// once, and turn off with 0; a bucket's piece of a shard slice is found and packed from
// hand-made key ranges.
#define BOOST_TEST_MODULE gradient_buckets
#include <boost/test/unit_test.hpp>

#include <numeric>
#include <utility>

#include "base/check.hpp"
#include "core/gradient_buckets.hpp"
#include "tests/support/models.hpp"

using namespace troupe;
using test::build_model;

namespace {

// The offset of a named block of m.
std::int64_t offset_of(const model& m, const std::string& name) {
  for (const param_block& b : m.blocks())
    if (b.name == name) return b.offset;
  BOOST_FAIL("no block " << name);
  return -1;
}

// The buckets tile [0, num_params) downwards and their layers tile [0, num_layers).
void check_tiling(const model& m, const std::vector<gradient_bucket>& buckets) {
  BOOST_REQUIRE(!buckets.empty());
  BOOST_TEST(buckets.front().top_layer == m.num_layers());
  BOOST_TEST(buckets.front().hi == m.num_params());
  BOOST_TEST(buckets.back().bottom_layer == 0);
  BOOST_TEST(buckets.back().lo == 0);
  for (std::size_t k = 1; k < buckets.size(); ++k) {
    BOOST_TEST(buckets[k].top_layer == buckets[k - 1].bottom_layer);
    BOOST_TEST(buckets[k].hi == buckets[k - 1].lo);
  }
}

// The cuts as [first, last) pairs, for one BOOST_TEST per case.
std::vector<std::pair<std::size_t, std::size_t>> cuts(const std::vector<std::int64_t>& bytes, std::int64_t min) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const bucket_cut& c : cut_buckets(bytes, min)) out.emplace_back(c.first, c.last);
  return out;
}

using pairs = std::vector<std::pair<std::size_t, std::size_t>>;

}  // namespace

BOOST_AUTO_TEST_CASE(a_bucket_closes_once_it_holds_the_asked_bytes_and_the_last_holds_the_rest) {
  BOOST_TEST((cuts({4, 4, 8, 2, 1}, 8) == pairs{{0, 2}, {2, 3}, {3, 5}}));
  BOOST_TEST((cuts({4, 4, 8}, 100) == pairs{{0, 3}}));
  BOOST_TEST((cuts({}, 8) == pairs{}));
}

BOOST_AUTO_TEST_CASE(a_last_bucket_with_no_bytes_joins_the_one_before) {
  BOOST_TEST((cuts({8, 0, 0}, 8) == pairs{{0, 3}}));
  BOOST_TEST((cuts({0, 0}, 8) == pairs{{0, 2}}));  // nothing before it: it stays
  BOOST_TEST((cuts({8, 0, 5}, 8) == pairs{{0, 1}, {1, 3}}));
}

BOOST_AUTO_TEST_CASE(zero_bytes_or_fewer_cut_every_item_alone) {
  BOOST_TEST((cuts({4, 0, 8}, 0) == pairs{{0, 1}, {1, 2}, {2, 3}}));
  BOOST_TEST((cuts({4, 8}, -1) == pairs{{0, 1}, {1, 2}}));
}

BOOST_AUTO_TEST_CASE(a_negative_size_is_refused) {
  BOOST_CHECK_THROW(cut_buckets({4, -1}, 8), contract_error);
}

BOOST_AUTO_TEST_CASE(the_mlp_cuts_below_its_two_small_layers) {
  const model m = build_model("mlp");  // 784-256-128-10: fc1 200,960 floats, fc2 32,896, fc3 1,290
  const auto buckets = plan_buckets(m, 128 << 10);
  check_tiling(m, buckets);
  BOOST_REQUIRE(buckets.size() == 2u);
  BOOST_TEST(buckets[0].lo == offset_of(m, "fc2.weight"));  // fc2 and fc3: 136,744 bytes >= 128 KiB
  BOOST_TEST(buckets[1].hi - buckets[1].lo == 784 * 256 + 256);
}

BOOST_AUTO_TEST_CASE(one_byte_gives_each_layer_with_parameters_its_own_bucket) {
  for (const char* spec : {"mlp", "cnn"}) {
    const model m = build_model(spec);
    const auto buckets = plan_buckets(m, 1);
    check_tiling(m, buckets);
    std::vector<int> with_params;
    for (const param_block& b : m.blocks())
      if (with_params.empty() || with_params.back() != b.layer) with_params.push_back(b.layer);
    BOOST_TEST(buckets.size() == with_params.size(), spec);
    for (const auto& b : buckets) BOOST_TEST(b.hi > b.lo, spec);
  }
}

BOOST_AUTO_TEST_CASE(zero_or_more_than_the_model_is_one_bucket) {
  const model m = build_model("cnn");
  for (std::int64_t bytes : {std::int64_t{0}, std::int64_t{-5}, 4 * m.num_params() + 1}) {
    const auto buckets = plan_buckets(m, bytes);
    BOOST_REQUIRE(buckets.size() == 1u);
    check_tiling(m, buckets);
  }
}

// A slice packed from ranges [0, 4), [10, 16), [20, 24) of a 24-float stage (14 floats).
BOOST_AUTO_TEST_CASE(a_piece_is_found_and_packed_across_ranges) {
  const std::vector<key_range> ranges{{0, 0, 0, 4}, {0, 1, 10, 6}, {0, 2, 20, 4}};
  tensor flat({24});
  std::iota(flat.data<float>(), flat.data<float>() + 24, 0.f);
  const slice_piece p = piece_of(ranges, 2, 12);  // stage floats 2, 3, 10, 11
  BOOST_TEST(p.offset == 2);
  BOOST_TEST(p.numel == 4);
  tensor out({p.numel});
  pack_piece(out, flat, ranges, 2, 12);
  BOOST_TEST((std::vector<float>(out.data<float>(), out.data<float>() + 4) == std::vector<float>{2, 3, 10, 11}));
  const slice_piece top = piece_of(ranges, 12, 24);
  BOOST_TEST(top.offset == 6);
  BOOST_TEST(top.numel == 8);
  const slice_piece none = piece_of(ranges, 4, 10);  // another shard's parameters
  BOOST_TEST(none.numel == 0);
  BOOST_CHECK_THROW(pack_piece(tensor({3}), flat, ranges, 2, 12), contract_error);
}
