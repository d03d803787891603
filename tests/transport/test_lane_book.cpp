// Tests for transport/lane_book.hpp: a member asks each shard once, and only for calls large
// enough; a lane carries calls only while open; a closed lane stays off and gives back the
// replies that waited on it.
#define BOOST_TEST_MODULE lane_book
#include <boost/test/unit_test.hpp>

#include "transport/lane_book.hpp"

using namespace troupe;
using namespace troupe::lane;

using book = member_book<int>;

BOOST_AUTO_TEST_CASE(a_shard_is_asked_once_and_only_for_a_large_call) {
  book b(2);
  BOOST_TEST(!b.should_ask(0, min_bytes - 1));
  BOOST_TEST(b.should_ask(0, min_bytes));
  BOOST_TEST(!b.should_ask(0, min_bytes));  // asking already
  BOOST_TEST((b.of(0) == book::state::asking));
  BOOST_TEST((b.of(1) == book::state::none));
  BOOST_TEST(!b.should_ask(7, min_bytes));  // no such shard
}

BOOST_AUTO_TEST_CASE(a_lane_carries_large_calls_once_open) {
  book b(1);
  b.should_ask(0, min_bytes);
  BOOST_TEST(!b.carries(0, min_bytes));
  b.offered(0);
  BOOST_TEST(!b.carries(0, min_bytes));  // dialling
  b.opened(0);
  BOOST_TEST(b.carries(0, min_bytes));
  BOOST_TEST(!b.carries(0, min_bytes - 1));  // small calls stay in the messages
  BOOST_TEST(b.next_ticket() != b.next_ticket());
}

BOOST_AUTO_TEST_CASE(a_refused_or_closed_lane_stays_off) {
  book b(2);
  b.should_ask(0, min_bytes);
  b.refused(0);
  BOOST_TEST((b.of(0) == book::state::off));
  BOOST_TEST(!b.should_ask(0, min_bytes));
  b.opened(0);  // a late event does not revive it
  BOOST_TEST(!b.carries(0, min_bytes));

  b.should_ask(1, min_bytes);
  b.offered(1);
  b.opened(1);
  BOOST_TEST(!b.replies.wait({1, 3}, 30).has_value());
  BOOST_TEST(!b.replies.wait({1, 4}, 40).has_value());
  const auto failed = b.closed(1);
  BOOST_TEST(failed == (std::vector<int>{30, 40}));
  BOOST_TEST(!b.carries(1, min_bytes));
  BOOST_TEST(!b.should_ask(1, min_bytes));
}
