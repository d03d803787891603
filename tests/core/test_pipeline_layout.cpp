// Tests for core/pipeline_layout.cpp: balanced cuts minimise the largest stage by FLOPs,
// parameters or any measured costs (stage_costs sums them) and refuse more stages than
// layers; stage spans tile the parameter
// vector; each stage's key ranges and shard slices cover exactly its parameters, so
// packing a stage's gradient per shard and placing it by slice rebuilds the full layout.
#define BOOST_TEST_MODULE pipeline_layout
#include <boost/test/unit_test.hpp>

#include "core/pipeline_layout.hpp"
#include "tests/support/models.hpp"

using namespace troupe;

using test::build_model;

BOOST_AUTO_TEST_CASE(balanced_cuts_minimise_the_largest_stage) {
  const model mlp = build_model("mlp");  // flatten fc1 relu fc2 relu fc3
  auto by_params = balanced_cuts(mlp, 2, stage_balance::params);
  BOOST_REQUIRE(by_params.has_value());
  // fc1 holds 200960 of 235146 parameters: the best split puts it alone.
  BOOST_TEST((*by_params == std::vector<int>{2}));
  const model cnn = build_model("cnn");
  for (auto by : {stage_balance::flops, stage_balance::params})
    for (int k = 1; k <= 4; ++k) {
      auto cuts = balanced_cuts(cnn, k, by);
      BOOST_REQUIRE(cuts.has_value());
      BOOST_TEST(cuts->size() == static_cast<std::size_t>(k - 1));
      BOOST_TEST(cnn.cut(*cuts).has_value());
    }
  // conv2 dominates the FLOPs (28x28 -> 14x14 with 32 -> 64 channels): three stages put
  // conv1 before it and the classifier after it.
  auto three = balanced_cuts(cnn, 3, stage_balance::flops);
  BOOST_REQUIRE(three.has_value());
  BOOST_TEST((*three)[0] <= 3);
  BOOST_TEST((*three)[1] >= 4);
  auto too_many = balanced_cuts(mlp, 7, stage_balance::flops);
  BOOST_REQUIRE(!too_many.has_value());
  BOOST_TEST(too_many.error().message.find("6 layers") != std::string::npos);
  BOOST_TEST(parse_stage_balance("memory").error().message.find("time, flops or params") != std::string::npos);
  BOOST_TEST((parse_stage_balance("time").value() == stage_balance::time));
  // Time needs a profile, which only layer_costs takes.
  BOOST_TEST(balanced_cuts(cnn, 2, stage_balance::time).error().message.find("layer_costs") != std::string::npos);
}

// Cuts minimise the slowest stage over any costs, and stage_costs sums each stage's.
BOOST_AUTO_TEST_CASE(cuts_by_cost_minimise_the_largest_stage_of_measured_costs) {
  const std::vector<double> cost{1, 1, 1, 6, 1, 2};
  auto two = cuts_by_cost(cost, 2, "m");
  BOOST_REQUIRE(two.has_value());
  BOOST_TEST((*two == std::vector<int>{3}));  // {1,1,1} | {6,1,2}: 9 beats {1,1,1,6} | {1,2}: 9 (earliest kept)
  BOOST_TEST((stage_costs(cost, *two) == std::vector<double>{3, 9}));
  auto three = cuts_by_cost(cost, 3, "m");
  BOOST_REQUIRE(three.has_value());
  BOOST_TEST((*three == std::vector<int>{3, 4}));  // {1,1,1} | {6} | {1,2}
  BOOST_TEST((stage_costs(cost, *three) == std::vector<double>{3, 6, 3}));
  BOOST_TEST((stage_costs(cost, {}) == std::vector<double>{12}));
  auto too_many = cuts_by_cost(cost, 7, "six");
  BOOST_REQUIRE(!too_many.has_value());
  BOOST_TEST(too_many.error().message.find("model 'six' has 6 layers") != std::string::npos);
  const model mlp = build_model("mlp");
  auto timed = layer_costs(mlp, stage_balance::time, 16);
  BOOST_REQUIRE(timed.has_value());
  BOOST_TEST(timed->size() == 6u);
  BOOST_TEST((*timed)[1] > 0.0);  // fc1, forward and backward
}

BOOST_AUTO_TEST_CASE(stage_ranges_and_slices_rebuild_the_parameter_layout) {
  const model cnn = build_model("cnn");
  const std::vector<int> cuts{3, 7};
  const auto spans = stage_spans(cnn, cuts);
  BOOST_REQUIRE(spans.size() == 3u);
  auto stages = cnn.cut(cuts);
  BOOST_REQUIRE(stages.has_value());
  std::int64_t offset = 0;
  for (std::size_t s = 0; s < spans.size(); ++s) {
    BOOST_TEST(spans[s].param_offset == offset);
    BOOST_TEST(spans[s].numel == (*stages)[s].num_params());
    offset += spans[s].numel;
  }
  BOOST_TEST(offset == cnn.num_params());
  // A full "gradient" whose value is its own index; each stage packs its part per shard,
  // and the shard places it by slice: every shard buffer must equal the full packing.
  tensor full({cnn.num_params()});
  for (std::int64_t i = 0; i < full.numel(); ++i) full.data<float>()[i] = static_cast<float>(i);
  const key_table table = partition_parameters(cnn, 3, 4096);
  for (std::uint32_t shard = 0; shard < 3; ++shard) {
    const auto ranges = table.ranges_of(shard);
    tensor expected({table.shard_numel[shard]});
    pack_shard(expected, full, ranges);
    const auto slices = shard_stage_slices(ranges, spans);
    tensor rebuilt({table.shard_numel[shard]});
    for (std::size_t s = 0; s < spans.size(); ++s) {
      const auto mine = stage_ranges(ranges, spans[s]);
      std::int64_t n = 0;
      for (const auto& r : mine) n += r.length;
      tensor packed({n});
      pack_shard(packed, full.view().flat(spans[s].param_offset, spans[s].numel), mine);
      BOOST_TEST(slices[s].size() <= 1u);  // one contiguous slice per stage
      std::int64_t pos = 0;
      for (const auto& [off, len] : slices[s]) {
        copy(rebuilt.view().flat(off, len), packed.view().flat(pos, len));
        pos += len;
      }
      BOOST_TEST(pos == n);
    }
    for (std::int64_t i = 0; i < expected.numel(); ++i)
      BOOST_REQUIRE(rebuilt.data<float>()[i] == expected.data<float>()[i]);
  }
}
