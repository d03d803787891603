// Tests for core/shard_core_slices.cpp: a pull of the whole buffer is answered with the
// parameters themselves, which an update leaves to the reply; a pipeline stage's slice is
// answered packed from its ranges, and a piece of it (a layer-by-layer pull) is cut across
// those ranges; a piece outside the slice is named as such.
#define BOOST_TEST_MODULE shard_core_slices
#include <boost/test/unit_test.hpp>
#include <string>
#include <utility>

#include "tests/support/plain_shard.hpp"

using namespace troupe;
using test::filled;
using test::plain_shard;

namespace {

constexpr std::int64_t n = test::plain_numel;

}  // namespace

BOOST_AUTO_TEST_CASE(a_whole_slice_is_answered_with_the_parameters_themselves_and_updates_leave_it_alone) {
  auto s = plain_shard(sync_mode::async);
  s.push(0, 0, 0, filled(-1.f));  // parameters 1 everywhere
  tensor reply = s.params_for(0);
  BOOST_TEST(reply.bytes() == s.params().bytes());  // not a copy: Note [Lent values]
  s.push(1, 0, 0, filled(-2.f));                    // an update overtakes the reply
  BOOST_TEST(s.params().data<float>()[0] == 3.f);
  BOOST_TEST(reply.bytes() != s.params().bytes());
  for (std::int64_t i = 0; i < n; ++i) BOOST_TEST(reply.data<float>()[i] == 1.f);
}

BOOST_AUTO_TEST_CASE(a_stages_slice_is_answered_packed) {
  shard_config cfg;
  cfg.stage_slices = {{{0, 3}, {5, 2}}, {{3, 2}, {7, 1}}};
  tensor p({n});
  for (std::int64_t i = 0; i < n; ++i) p.data<float>()[i] = static_cast<float>(i);
  shard_core s(cfg, std::move(p));
  s.start({0, 1}, {0, 1});
  tensor a = s.params_for(0), b = s.params_for(1);
  BOOST_REQUIRE(a.numel() == 5);
  BOOST_REQUIRE(b.numel() == 3);
  const float want_a[] = {0, 1, 2, 5, 6}, want_b[] = {3, 4, 7};
  for (int i = 0; i < 5; ++i) BOOST_TEST(a.data<float>()[i] == want_a[i]);
  for (int i = 0; i < 3; ++i) BOOST_TEST(b.data<float>()[i] == want_b[i]);
}

// Stage 0 owns [0, 3) and [5, 7) of the buffer, 5 floats packed; its piece [2, +2) is the
// last float of the first range and the first of the second.
BOOST_AUTO_TEST_CASE(a_piece_of_a_stages_slice_is_cut_across_its_ranges) {
  shard_config cfg;
  cfg.stage_slices = {{{0, 3}, {5, 2}}, {{3, 2}, {7, 1}}};
  tensor p({n});
  for (std::int64_t i = 0; i < n; ++i) p.data<float>()[i] = static_cast<float>(10 * i);
  shard_core s(cfg, std::move(p));
  s.start({0, 1}, {0, 1});
  tensor across = s.piece_for(0, 2, 2);
  BOOST_REQUIRE(across.numel() == 2);
  BOOST_TEST(across.data<float>()[0] == 20.f);
  BOOST_TEST(across.data<float>()[1] == 50.f);
  tensor tail = s.piece_for(1, 2, 1);  // stage 1's third float: buffer element 7
  BOOST_REQUIRE(tail.numel() == 1);
  BOOST_TEST(tail.data<float>()[0] == 70.f);
  BOOST_TEST(s.check_piece(0, 0, 5).empty());
  for (auto [offset, numel] : {std::pair<std::int64_t, std::int64_t>{3, 3}, {-1, 2}, {0, 0}, {5, 1}}) {
    const std::string why = s.check_piece(0, offset, numel);
    BOOST_TEST(why.find("does not lie in the sender's slice of 5 floats") != std::string::npos,
               offset << "+" << numel << ": " << why);
  }
}
