// Tests for core/tensor_fusion.cpp: consecutive tensors share a buffer up to the
// threshold, a larger one travels alone, and packing then unpacking gives back every
// tensor bit for bit.
#define BOOST_TEST_MODULE tensor_fusion
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <vector>

#include "core/tensor_fusion.hpp"

using namespace troupe;

namespace {

std::vector<std::pair<std::size_t, std::size_t>> spans(const std::vector<fusion_group>& gs) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& g : gs) out.emplace_back(g.first, g.last);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(consecutive_tensors_share_a_buffer_up_to_the_threshold) {
  // 64 bytes hold 16 floats: 4 + 8 + 4 fill one, 1 starts the next.
  const auto gs = plan_fusion({4, 8, 4, 1, 3}, 64);
  using span = std::pair<std::size_t, std::size_t>;
  BOOST_TEST((spans(gs) == std::vector<span>{{0, 3}, {3, 5}}));
  BOOST_TEST(gs[0].numel == 16);
  BOOST_TEST(gs[1].numel == 4);
}

BOOST_AUTO_TEST_CASE(a_tensor_over_the_threshold_travels_alone) {
  using span = std::pair<std::size_t, std::size_t>;
  BOOST_TEST((spans(plan_fusion({2, 100, 2, 2}, 64)) == std::vector<span>{{0, 1}, {1, 2}, {2, 4}}));
  BOOST_TEST((spans(plan_fusion({3, 3}, 0)) == std::vector<span>{{0, 1}, {1, 2}}));   // 0: no fusion
  BOOST_TEST((spans(plan_fusion({0, 0, 5}, 20)) == std::vector<span>{{0, 3}}));        // empty ones ride along
  BOOST_TEST(plan_fusion({}, 64).empty());
}

BOOST_AUTO_TEST_CASE(pack_then_unpack_gives_every_tensor_back) {
  std::vector<tensor> in;
  for (std::int64_t n : {3, 0, 5, 2}) {
    tensor t({n});
    for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(10 * n + i) + 0.25f;
    in.push_back(std::move(t));
  }
  const auto gs = plan_fusion({3, 0, 5, 2}, 1 << 20);
  BOOST_TEST_REQUIRE(gs.size() == 1u);
  tensor buffer({gs[0].numel});
  std::vector<const_tensor_view> src(in.begin(), in.end());
  pack_fusion(buffer, src, gs[0]);
  BOOST_TEST(buffer.data<float>()[3] == 50.25f);  // the third tensor right after the first (the second is empty)
  std::vector<tensor> out;
  for (const auto& t : in) out.emplace_back(tensor({t.numel()}));
  std::vector<tensor_view> dst(out.begin(), out.end());
  unpack_fusion(buffer, dst, gs[0]);
  for (std::size_t i = 0; i < in.size(); ++i)
    BOOST_TEST(std::memcmp(in[i].bytes(), out[i].bytes(), in[i].nbytes()) == 0);
}
