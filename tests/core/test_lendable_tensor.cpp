// Tests for core/lendable_tensor.cpp (Note [Lent values]): an update goes in place while
// nothing is lent and to a copy while something is; a lent tensor keeps what it held and
// outlives its source.
#define BOOST_TEST_MODULE lendable_tensor
#include <boost/test/unit_test.hpp>

#include "core/lendable_tensor.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

lendable_tensor filled(float v, std::int64_t n = 4) { return lendable_tensor(test::filled(n, v)); }

}  // namespace

BOOST_AUTO_TEST_CASE(an_update_with_nothing_lent_is_in_place) {
  auto v = filled(1.f);
  const std::byte* at = v.get().bytes();
  v.for_update().data<float>()[0] = 2.f;
  BOOST_TEST(v.get().bytes() == at);
  BOOST_TEST(v.get().data<float>()[0] == 2.f);
}

BOOST_AUTO_TEST_CASE(an_update_while_lent_goes_to_a_copy_and_the_loan_keeps_its_values) {
  auto v = filled(1.f);
  tensor loan = v.lend();
  BOOST_TEST(loan.bytes() == v.get().bytes());
  BOOST_TEST(loan.numel() == 4);
  BOOST_TEST((loan.type() == dtype::f32));
  tensor& next = v.for_update();
  BOOST_TEST(next.bytes() != loan.bytes());
  BOOST_TEST(next.data<float>()[3] == 1.f);  // the copy starts from the current value
  next.data<float>()[3] = 9.f;
  BOOST_TEST(loan.data<float>()[3] == 1.f);
  const std::byte* now = v.get().bytes();
  loan = tensor();  // returned: the next update is in place again
  v.for_update();
  BOOST_TEST(v.get().bytes() == now);
}

BOOST_AUTO_TEST_CASE(two_loans_and_a_loan_that_outlives_its_source) {
  tensor first, second;
  {
    auto v = filled(5.f);
    first = v.lend();
    second = v.lend();
    BOOST_TEST(first.bytes() == second.bytes());
    v.for_update().data<float>()[0] = 6.f;
  }
  BOOST_TEST(first.data<float>()[0] == 5.f);
  first = tensor();
  BOOST_TEST(second.data<float>()[0] == 5.f);  // still held by the other loan
}
