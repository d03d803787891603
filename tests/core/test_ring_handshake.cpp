// Tests for core/ring_handshake.cpp (Note [Ring connections]): in a ring of 2, seat 0
// dials once and takes seat 1 as both neighbours, seat 1 waits for that one hello; in a
// ring of 4 the lower seat of each pair dials, seat 0 also closes the ring and the last
// seat waits for both hellos; a users' ring also waits for the dialled next's ack; a hello
// from anyone the welcome does not name, twice, or unasked-for acks are refused; the
// deadline names the neighbour still silent, the previous first.
#define BOOST_TEST_MODULE ring_handshake
#include <boost/test/unit_test.hpp>

#include "core/ring_handshake.hpp"

using namespace troupe;
using side = ring_handshake::side;

BOOST_AUTO_TEST_CASE(in_a_ring_of_two_the_lower_seat_dials_once_and_the_other_takes_its_hello) {
  ring_handshake zero(2, 0, false), one(2, 1, false);
  BOOST_TEST(zero.one_neighbour());
  BOOST_TEST(zero.dial_next());
  BOOST_TEST(!zero.dial_prev());
  BOOST_TEST(zero.pending() == 1u);
  BOOST_TEST(!zero.silent().has_value());  // a dial fails by its own deadline
  zero.dialled(side::next);
  BOOST_TEST(zero.wired());

  BOOST_TEST(!one.dial_next());
  BOOST_TEST(!one.dial_prev());
  BOOST_TEST(one.pending() == 1u);
  BOOST_TEST((one.silent() == side::prev));
  BOOST_TEST(!one.hello(false, false).has_value());  // a stranger wires nothing
  BOOST_TEST((one.hello(true, true) == side::prev));  // seat 0 is both neighbours: taken as the previous
  BOOST_TEST(one.wired());
  BOOST_TEST(!one.hello(true, true).has_value());  // twice: refused
  BOOST_TEST(!one.silent().has_value());
}

BOOST_AUTO_TEST_CASE(in_a_ring_of_four_seat_zero_closes_the_ring_and_the_last_seat_waits_for_both) {
  ring_handshake zero(4, 0, false), mid(4, 2, false), last(4, 3, false);
  BOOST_TEST(zero.dial_next());
  BOOST_TEST(zero.dial_prev());
  BOOST_TEST(zero.pending() == 2u);
  zero.dialled(side::prev);
  BOOST_TEST(!zero.wired());
  zero.dialled(side::next);
  BOOST_TEST(zero.wired());
  BOOST_TEST(!zero.hello(true, false).has_value());  // seat 0 waits for no hello

  BOOST_TEST(mid.dial_next());
  BOOST_TEST(!mid.dial_prev());
  BOOST_TEST(mid.pending() == 2u);
  BOOST_TEST(!mid.hello(false, true).has_value());  // its next does not say hello: it dials it
  BOOST_TEST((mid.hello(true, false) == side::prev));
  mid.dialled(side::next);
  BOOST_TEST(mid.wired());

  BOOST_TEST(!last.dial_next());
  BOOST_TEST(!last.dial_prev());
  BOOST_TEST(last.pending() == 2u);
  BOOST_TEST((last.silent() == side::prev));
  BOOST_TEST((last.hello(false, true) == side::next));  // seat 0's hello closes the ring
  BOOST_TEST((last.silent() == side::prev));
  BOOST_TEST((last.hello(true, false) == side::prev));
  BOOST_TEST(last.wired());
}

BOOST_AUTO_TEST_CASE(a_users_ring_waits_for_the_dialled_next_to_answer) {
  ring_handshake zero(3, 0, true), last(3, 2, true);
  BOOST_TEST(zero.pending() == 3u);  // two dials and the next's ack
  zero.dialled(side::next);
  zero.dialled(side::prev);
  BOOST_TEST(!zero.wired());
  BOOST_TEST((zero.silent() == side::next));
  BOOST_TEST(zero.acked());
  BOOST_TEST(zero.wired());
  BOOST_TEST(!zero.acked());  // an ack nobody waits for is refused

  BOOST_TEST(last.pending() == 2u);  // the last seat dials nobody, so waits for no ack
  BOOST_TEST(!last.acked());
  BOOST_TEST((last.hello(true, false) == side::prev));
  BOOST_TEST((last.silent() == side::next));
  BOOST_TEST((last.hello(false, true) == side::next));
  BOOST_TEST(last.wired());
}
