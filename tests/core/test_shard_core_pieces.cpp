// Tests for core/shard_core_pieces.cpp: a gradient pushed in pieces makes the same sync
// round and the same async update as a whole one, and only once it is complete; a bad
// piece (not finite, overlapping, outside the slice, unreadable) refuses its clock, whose
// later pieces are refused too; a member that leaves loses its open pieces.
#define BOOST_TEST_MODULE shard_core_pieces
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/support/plain_shard.hpp"

using namespace troupe;
using test::filled;
using test::order_sensitive;
using test::plain_shard;
using test::same_bits;

namespace {

constexpr std::int64_t n = test::plain_numel;

// Elements [offset, offset + len) of t.
tensor part(const tensor& t, std::int64_t offset, std::int64_t len) {
  tensor out({len});
  std::memcpy(out.data<float>(), t.data<float>() + offset, static_cast<std::size_t>(len) * sizeof(float));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(pieces_make_the_same_sync_round_as_whole_gradients) {
  const auto [g0, g1, g2] = order_sensitive();
  auto whole = plain_shard(sync_mode::sync), pieces = plain_shard(sync_mode::sync);
  whole.push(0, 0, 0, g0);
  whole.push(1, 0, 0, g1);
  whole.push(2, 0, 0, g2);
  // Worker 1 pushes the top of its slice first, as backward produces it.
  pieces.push(0, 0, 0, g0);
  auto top = pieces.push(1, 0, 0, part(g1, 5, 3), {{}, 5, 3});
  BOOST_TEST(!top.error);
  BOOST_TEST(top.version == 0);
  BOOST_TEST(!pieces.push(1, 0, 0, part(g1, 2, 3), {{}, 2, 3}).error);
  BOOST_TEST((pieces.pull(0, 1, 40).decision == shard_core::pull_decision::hold));
  pieces.push(2, 0, 0, g2);
  BOOST_TEST(pieces.version() == 0);  // worker 1's gradient is not complete
  BOOST_TEST(pieces.take_released().empty());
  auto last = pieces.push(1, 0, 0, part(g1, 0, 2), {{}, 0, 2});
  BOOST_TEST(!last.error);
  BOOST_TEST(pieces.version() == 1);
  BOOST_TEST(same_bits(whole.params(), pieces.params()));
  BOOST_TEST(pieces.take_released() == (std::vector<shard_core::token>{40}));
  BOOST_TEST(pieces.counters().gradients == 3);  // one gradient, however many pieces
}

BOOST_AUTO_TEST_CASE(pieces_make_one_async_update_when_the_gradient_is_complete) {
  tensor g = test::random_tensor({n}, 4);
  auto whole = plain_shard(sync_mode::async), pieces = plain_shard(sync_mode::async);
  whole.push(0, 0, 0, g);
  BOOST_TEST(!pieces.push(0, 0, 0, part(g, 4, 4), {{}, 4, 4}).error);
  BOOST_TEST(pieces.version() == 0);  // nothing applied yet
  BOOST_TEST(pieces.params().data<float>()[7] == 0.f);
  BOOST_TEST(!pieces.push(0, 0, 0, part(g, 0, 4), {{}, 0, 4}).error);
  BOOST_TEST(pieces.version() == 1);
  BOOST_TEST(same_bits(whole.params(), pieces.params()));
  BOOST_TEST(!pieces.push(0, 1, 1, part(g, 0, 8), {{}, 0, 8}).error);  // a piece of the whole slice is a gradient
  BOOST_TEST(pieces.version() == 2);
}

BOOST_AUTO_TEST_CASE(a_refused_piece_refuses_its_clock_and_the_round_goes_on) {
  tensor g = filled(1.f);
  tensor bad = part(g, 0, 4);
  bad.data<float>()[1] = std::numeric_limits<float>::infinity();
  auto s = plain_shard(sync_mode::sync);
  s.push(0, 0, 0, filled(2.f));
  s.push(1, 0, 0, filled(4.f));
  BOOST_TEST(!s.push(2, 0, 0, part(g, 4, 4), {{}, 4, 4}).error);
  const auto out = s.push(2, 0, 0, bad, {{}, 0, 4});
  BOOST_TEST((out.error->code == errc::not_finite));
  BOOST_TEST(out.error->detail.find("piece [0, +4) of worker 2's clock-0 gradient") != std::string::npos, out.error->detail);
  BOOST_TEST(s.version() == 1);                     // the round closed with the two whole gradients
  BOOST_TEST(s.params().data<float>()[7] == -6.f);  // and nothing of worker 2's good piece
  // The clock's later pieces are refused with the same code; the next clock is taken.
  auto late = plain_shard(sync_mode::async);
  BOOST_TEST(!late.push(0, 0, 0, part(g, 0, 2), {{}, 0, 2}).error);
  BOOST_TEST((late.push(0, 0, 0, part(g, 1, 2), {{}, 1, 2}).error->code == errc::duplicate));  // overlaps [0, 2)
  const auto again = late.push(0, 0, 0, part(g, 3, 5), {{}, 3, 5});
  BOOST_TEST((again.error->code == errc::duplicate));
  BOOST_TEST(again.error->detail.find("an earlier piece was refused") != std::string::npos, again.error->detail);
  BOOST_TEST(late.version() == 0);
  BOOST_TEST(late.params().data<float>()[0] == 0.f);
  BOOST_TEST(!late.push(0, 1, 0, g).error);
  BOOST_TEST(late.version() == 1);
}

BOOST_AUTO_TEST_CASE(a_piece_outside_the_slice_or_unreadable_is_refused) {
  auto s = plain_shard(sync_mode::async);
  BOOST_TEST((s.push(0, 0, 0, part(filled(1.f), 0, 4), {{}, 6, 4}).error->code == errc::bad_shape));
  BOOST_TEST((s.push(1, 0, 0, part(filled(1.f), 0, 4), {{}, -1, 4}).error->code == errc::bad_shape));
  BOOST_TEST((s.push(2, 0, 0, part(filled(1.f), 0, 3), {{}, 0, 4}).error->code == errc::bad_shape));  // 3 floats said 4
  auto sync = plain_shard(sync_mode::sync);
  BOOST_TEST((sync.push(0, 0, 0, tensor(), {"a torn slot", 4, 4}).error->code == errc::malformed));
  BOOST_TEST(s.version() == 0);
  BOOST_TEST(s.counters().rejected == 3);
}

BOOST_AUTO_TEST_CASE(a_member_that_leaves_loses_its_open_pieces) {
  auto s = plain_shard(sync_mode::sync);
  s.push(0, 0, 0, filled(2.f));
  s.push(1, 0, 0, filled(4.f));
  BOOST_TEST(!s.push(2, 0, 0, part(filled(8.f), 0, 4), {{}, 0, 4}).error);
  s.member_left(2);
  BOOST_TEST(s.version() == 1);
  BOOST_TEST(s.params().data<float>()[0] == -6.f);
}
