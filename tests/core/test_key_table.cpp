// Tests for core/key_table.cpp: the ranges tile the parameter vector, big blocks are
// split, shards are balanced, the table is deterministic, and packing round-trips.
#define BOOST_TEST_MODULE key_table
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "core/key_table.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

model mlp() { return *model::build(*parse_model_spec("mlp"), {1, 28, 28}, 10); }

}  // namespace

BOOST_AUTO_TEST_CASE(ranges_tile_the_parameters) {
  const model m = mlp();
  for (std::uint32_t shards : {1u, 2u, 3u, 8u}) {
    auto t = partition_parameters(m, shards, 0);
    std::int64_t pos = 0;
    for (const auto& r : t.ranges) {
      BOOST_TEST(r.offset == pos);
      BOOST_TEST(r.length > 0);
      BOOST_TEST(r.shard < shards);
      pos += r.length;
    }
    BOOST_TEST(pos == m.num_params());
    std::int64_t total = 0;
    for (auto s : t.shard_numel) total += s;
    BOOST_TEST(total == m.num_params());
  }
}

BOOST_AUTO_TEST_CASE(big_blocks_are_split_and_shards_balanced) {
  const model m = mlp();  // fc1.weight alone is 85% of the parameters
  auto t = partition_parameters(m, 2, 0);
  const auto [lo, hi] = std::minmax_element(t.shard_numel.begin(), t.shard_numel.end());
  BOOST_TEST(static_cast<double>(*hi) / static_cast<double>(*lo) < 1.10);
  int fc1_pieces = 0;
  for (const auto& r : t.ranges) fc1_pieces += r.block == 0;
  BOOST_TEST(fc1_pieces > 1);
  // An explicit bound above every block splits nothing.
  auto whole = partition_parameters(m, 2, 1 << 30);
  BOOST_TEST(whole.ranges.size() == m.blocks().size());
  // One shard never splits.
  BOOST_TEST(partition_parameters(m, 1, 0).ranges.size() == m.blocks().size());
}

BOOST_AUTO_TEST_CASE(partition_is_deterministic) {
  const model m = *model::build(*parse_model_spec("cnn"), {1, 28, 28}, 10);
  auto a = partition_parameters(m, 3, 0), b = partition_parameters(m, 3, 0);
  BOOST_REQUIRE(a.ranges.size() == b.ranges.size());
  for (std::size_t i = 0; i < a.ranges.size(); ++i) {
    BOOST_TEST(a.ranges[i].shard == b.ranges[i].shard);
    BOOST_TEST(a.ranges[i].offset == b.ranges[i].offset);
  }
}

BOOST_AUTO_TEST_CASE(pack_and_unpack_round_trip) {
  const model m = mlp();
  auto t = partition_parameters(m, 3, 0);
  tensor flat = test::random_tensor({m.num_params()}, 1), back({m.num_params()});
  for (std::uint32_t s = 0; s < 3; ++s) {
    tensor buf({t.shard_numel[s]});
    pack_shard(buf, flat, t.ranges_of(s));
    unpack_shard(back, buf, t.ranges_of(s));
  }
  BOOST_TEST(std::equal(flat.data<float>(), flat.data<float>() + flat.numel(), back.data<float>()));
  tensor wrong({t.shard_numel[0] + 1});
  BOOST_CHECK_THROW(pack_shard(wrong, flat, t.ranges_of(0)), contract_error);
}
