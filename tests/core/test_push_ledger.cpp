// push_ledger: what a member's pushes owe it. Answers due count up with each push and
// down with each answer or refusal; a refusal is counted once per shard and clock however
// many pieces were refused; a late answer moves the open round and drops its clock once,
// however many shards answer it late, and the dropped samples are reported once; residuals
// are kept only for the shards asked.
#define BOOST_TEST_MODULE push_ledger
#include <boost/test/unit_test.hpp>

#include "core/push_ledger.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(answers_due_follow_pushes_answers_and_refusals) {
  push_ledger l({0, 0});
  l.sent(100);
  l.sent(28);
  l.sent(4);
  BOOST_TEST(l.pending() == 3);
  BOOST_TEST(l.bytes() == 132);
  BOOST_TEST(!l.answered(0, kv_push_ack{{1}, {0}, false}));
  BOOST_TEST(l.refused(1, 0));
  BOOST_TEST(!l.refused(1, 0));  // a second piece of the same gradient
  BOOST_TEST(l.pending() == 0);
  BOOST_TEST(l.rejected() == 1);
  BOOST_TEST(!l.answered(1, kv_push_ack{}));  // an answer with none due leaves nothing negative
  BOOST_TEST(l.pending() == 0);
}

BOOST_AUTO_TEST_CASE(refusals_count_per_shard_and_clock) {
  push_ledger l({0, 0});
  for (int i = 0; i < 4; ++i) l.sent(1);
  BOOST_TEST(l.refused(0, 5));
  BOOST_TEST(l.refused(1, 5));  // another shard's refusal of the same clock
  BOOST_TEST(l.refused(0, 6));
  BOOST_TEST(!l.refused(0, 6));
  BOOST_TEST(l.rejected() == 3);
  BOOST_TEST(l.refused(7, 6));  // a shard past the job's is counted, never remembered
  BOOST_TEST(l.rejected() == 4);
}

BOOST_AUTO_TEST_CASE(a_late_answer_drops_its_clock_once_and_names_the_open_round) {
  push_ledger l({0, 0});
  for (int i = 0; i < 3; ++i) l.sent(1);
  BOOST_TEST(l.answered(4, kv_push_ack{{6}, {0}, true}));
  l.dropped(32);
  BOOST_TEST(!l.answered(4, kv_push_ack{{5}, {0}, true}));  // the other shard's late answer of clock 4
  BOOST_TEST(l.open_round() == 6);                   // never moves back
  BOOST_TEST(l.answered(5, kv_push_ack{{7}, {0}, true}));
  l.dropped(16);
  BOOST_TEST(l.open_round() == 7);
  BOOST_TEST(l.take_dropped() == 48);
  BOOST_TEST(l.take_dropped() == 0);  // reported once
}

BOOST_AUTO_TEST_CASE(residuals_are_kept_only_where_asked) {
  push_ledger l({0, 12});
  BOOST_TEST(l.residual(0).empty());
  BOOST_TEST(l.residual(1).numel() == 12);
  BOOST_TEST(l.residual(1).data<float>()[11] == 0.0f);  // starts at zero
}
