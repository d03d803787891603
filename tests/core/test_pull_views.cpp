// Tests for core/pull_views.cpp (Note [2-bit pulls]): the first answer, and any that asks
// for it, is full; later answers are 2-bit codes of the change, which leave the shard's
// and the member's views bitwise equal and bring the view to the parameters over a few
// pulls; an answer over the fast path makes the next one full; a member refuses codes it
// cannot apply and keeps its view.
#define BOOST_TEST_MODULE pull_views
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/pull_views.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::same_bits;

namespace {

constexpr std::int64_t n = 1000;
const grad_codec two_bit = *parse_grad_codec("2bit");

double mean_gap(const tensor& a, const tensor& b) {
  double sum = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) sum += std::fabs(a.data<float>()[i] - b.data<float>()[i]);
  return sum / static_cast<double>(a.numel());
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_first_answer_is_full_and_later_ones_are_two_bit_codes_that_keep_both_views_equal) {
  pull_views shard(two_bit);
  tensor member_view;
  tensor params = test::random_tensor({n}, 1);
  tensor first = shard.answer(3, tensor(params), false);
  BOOST_TEST((first.type() == dtype::f32));
  BOOST_REQUIRE(!apply_pull(two_bit, member_view, first, n));
  BOOST_TEST(same_bits(member_view, params));

  // An update moves the parameters; each answer carries about 1/16 of the bytes.
  tensor step = test::random_tensor({n}, 2, 1e-2f);
  for (std::int64_t i = 0; i < n; ++i) params.data<float>()[i] -= step.data<float>()[i];
  const double before = mean_gap(member_view, params);
  for (int pull = 0; pull < 12; ++pull) {
    tensor wire = shard.answer(3, tensor(params), false);
    BOOST_TEST((wire.type() != dtype::f32));
    BOOST_TEST(wire.nbytes() == static_cast<std::size_t>(encoded_bytes(two_bit, n)));
    BOOST_REQUIRE(!apply_pull(two_bit, member_view, wire, n));
    BOOST_REQUIRE(shard.view(3) != nullptr);
    BOOST_TEST(same_bits(*shard.view(3), member_view));  // the same codes, the same sums
  }
  // What one answer left out went with the next ones (the gap is the error feedback).
  BOOST_TEST(mean_gap(member_view, params) < 0.05 * before);
}

BOOST_AUTO_TEST_CASE(a_pull_that_asks_for_the_full_values_and_one_after_the_fast_path_get_them) {
  pull_views shard(two_bit);
  tensor params = test::random_tensor({n}, 4);
  shard.answer(0, tensor(params), false);
  BOOST_TEST((shard.answer(0, tensor(params), false).type() != dtype::f32));
  tensor full = shard.answer(0, tensor(params), true);  // a member that restarted
  BOOST_TEST((full.type() == dtype::f32));
  BOOST_TEST(same_bits(full, params));
  shard.forget(0);  // answered through shared memory meanwhile
  BOOST_TEST(shard.view(0) == nullptr);
  BOOST_TEST((shard.answer(0, tensor(params), false).type() == dtype::f32));
  BOOST_TEST(shard.view(1) == nullptr);  // views are per member
}

BOOST_AUTO_TEST_CASE(a_member_refuses_what_it_cannot_apply_and_keeps_its_view) {
  tensor view;
  pull_views shard(two_bit);
  tensor params = test::random_tensor({n}, 5);
  shard.answer(0, tensor(params), false);
  tensor codes = shard.answer(0, test::random_tensor({n}, 6), false);
  auto no_view = apply_pull(two_bit, view, codes, n);
  BOOST_REQUIRE(no_view.has_value());
  BOOST_TEST(no_view->find("holds no parameters") != std::string::npos);
  BOOST_TEST(view.empty());

  BOOST_REQUIRE(!apply_pull(two_bit, view, params, n));
  auto short_answer = apply_pull(two_bit, view, test::random_tensor({n - 1}, 7), n);
  BOOST_REQUIRE(short_answer.has_value());
  BOOST_TEST(short_answer->find("999 parameters, expected 1000") != std::string::npos);
  BOOST_TEST(same_bits(view, params));
  // An answer sent without its values: a default tensor's shape says one element.
  tensor one_view;
  auto no_values = apply_pull(two_bit, one_view, tensor(), 1);
  BOOST_REQUIRE(no_values.has_value());
  BOOST_TEST(no_values->find("0 parameters, expected 1") != std::string::npos);

  tensor bad = tensor(codes);
  std::memset(bad.bytes() + 4, 0xFF, 4);  // code 3 is malformed
  BOOST_TEST(apply_pull(two_bit, view, bad, n).has_value());
}
