// Tests for net/handshake_ledger.cpp, stepped with a fake clock: a handshake waiting for
// its peer loses EPOLLOUT and gets it back when it finishes or wants to send; deadlines
// expire each handshake once and bound how long epoll may sleep; the cap evicts the
// oldest inbound handshake, silent ones first; a new session on a reused socket starts
// afresh; a handshake whose socket CAF stops reading is abandoned at once.
#define BOOST_TEST_MODULE handshake_ledger
#include <boost/test/unit_test.hpp>

#include <sys/epoll.h>

#include "net/handshake_ledger.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using progress = handshake_ledger::progress;

namespace {

const handshake_ledger::clock::time_point t0{};
const int ep = 100;
const std::uint32_t in_out = EPOLLIN | EPOLLOUT;
int s1, s2, s3;  // stand-ins for SSL sessions

handshake_ledger ledger(std::size_t cap = 64) { return handshake_ledger({10s, cap}); }

}  // namespace

BOOST_AUTO_TEST_CASE(a_handshake_waiting_for_its_peer_is_not_polled_for_writing) {
  auto l = ledger();
  // CAF's order: the accept call first, then the socket's registration.
  BOOST_TEST(!l.on_step(7, &s1, true, progress::waiting_for_peer, t0).change.has_value());
  BOOST_TEST(l.on_register(ep, 7, EPOLLIN, 42).events == std::uint32_t{EPOLLIN});
  BOOST_TEST(l.on_register(ep, 7, in_out, 42).events == std::uint32_t{EPOLLIN});  // its BASP handshake is queued
  // The client's first flight: still waiting, nothing to change.
  BOOST_TEST(!l.on_step(7, &s1, true, progress::waiting_for_peer, t0 + 1ms).change.has_value());
  // Finished: EPOLLOUT comes back, with CAF's data.
  const auto done = l.on_step(7, &s1, true, progress::finished, t0 + 2ms);
  BOOST_REQUIRE(done.change.has_value());
  BOOST_TEST(done.change->epfd == ep);
  BOOST_TEST(done.change->fd == 7);
  BOOST_TEST(done.change->events == in_out);
  BOOST_TEST(done.change->data == 42u);
  BOOST_TEST(l.on_register(ep, 7, in_out, 42).events == in_out);  // later registrations pass untouched
  BOOST_TEST(!l.time_to_next_deadline(t0).has_value());
}

BOOST_AUTO_TEST_CASE(a_handshake_that_wants_to_send_is_polled_for_writing) {
  auto l = ledger();
  l.on_step(7, &s1, false, progress::waiting_for_peer, t0);
  BOOST_TEST(l.on_register(ep, 7, in_out, 1).events == std::uint32_t{EPOLLIN});
  const auto r = l.on_step(7, &s1, false, progress::waiting_to_send, t0);
  BOOST_REQUIRE(r.change.has_value());
  BOOST_TEST(r.change->events == in_out);
  const auto back = l.on_step(7, &s1, false, progress::waiting_for_peer, t0);
  BOOST_REQUIRE(back.change.has_value());
  BOOST_TEST(back.change->events == std::uint32_t{EPOLLIN});
}

// Note [Abandoned handshakes]: CAF closing a connection mid-handshake stops reading it
// and keeps only EPOLLOUT for what it has queued; the handshake is condemned then, once,
// whichever side it is, and its deadline no longer bounds epoll's sleep.
BOOST_AUTO_TEST_CASE(a_handshake_whose_socket_is_no_longer_read_is_abandoned_at_once) {
  for (const bool accepting : {true, false}) {
    auto l = ledger();
    l.on_step(7, &s1, accepting, progress::waiting_for_peer, t0);
    const auto first = l.on_register(ep, 7, in_out, 5);
    BOOST_TEST(!first.abandoned);
    BOOST_TEST(first.events == std::uint32_t{EPOLLIN});
    BOOST_TEST((*l.time_to_next_deadline(t0) == 10s));
    const auto closing = l.on_register(ep, 7, EPOLLOUT, 5);
    BOOST_TEST(closing.abandoned);
    BOOST_TEST(closing.events == 0u);  // still waiting for its peer: EPOLLOUT stays withheld
    BOOST_TEST(l.condemned(7));
    BOOST_TEST(!l.may_continue(7, t0 + 1ms));  // a later handshake call fails without OpenSSL
    BOOST_TEST(!l.time_to_next_deadline(t0).has_value());
    BOOST_TEST(l.take_expired(t0 + 1h).empty());  // condemned once, not again at the deadline
    BOOST_TEST(!l.on_register(ep, 7, 0, 5).abandoned);
  }
}

BOOST_AUTO_TEST_CASE(a_finished_connection_may_stop_reading) {
  auto l = ledger();
  l.on_step(7, &s1, false, progress::waiting_for_peer, t0);
  l.on_register(ep, 7, in_out, 5);
  l.on_step(7, &s1, false, progress::finished, t0 + 1ms);
  const auto r = l.on_register(ep, 7, EPOLLOUT, 5);
  BOOST_TEST(!r.abandoned);
  BOOST_TEST(r.events == std::uint32_t{EPOLLOUT});
  BOOST_TEST(l.may_continue(7, t0 + 1h));
}

BOOST_AUTO_TEST_CASE(sockets_without_a_handshake_are_never_touched) {
  auto l = ledger();
  BOOST_TEST(l.on_register(ep, 3, in_out, 0).events == in_out);
  BOOST_TEST(!l.on_register(ep, 3, EPOLLOUT, 0).abandoned);
  BOOST_TEST(l.may_continue(3, t0 + 1h));
  BOOST_TEST(l.take_expired(t0 + 1h).empty());
}

BOOST_AUTO_TEST_CASE(a_deadline_expires_once_and_bounds_the_sleep) {
  auto l = ledger();
  l.on_step(7, &s1, true, progress::waiting_for_peer, t0);
  l.on_step(8, &s2, true, progress::waiting_for_peer, t0 + 4s);
  BOOST_TEST((*l.time_to_next_deadline(t0 + 3s) == 7s));
  BOOST_TEST(l.may_continue(7, t0 + 9s));
  BOOST_TEST(l.take_expired(t0 + 9s).empty());
  BOOST_TEST(!l.may_continue(7, t0 + 10s));  // past its deadline even before the sweep
  const auto expired = l.take_expired(t0 + 10s);
  BOOST_TEST(expired == std::vector<int>{7});
  BOOST_TEST(l.condemned(7));
  BOOST_TEST(l.take_expired(t0 + 11s).empty());  // once
  BOOST_TEST((*l.time_to_next_deadline(t0 + 10s) == 4s));  // the condemned one no longer counts
  l.forget(7, &s1);
  BOOST_TEST(!l.condemned(7));
}

BOOST_AUTO_TEST_CASE(over_the_cap_the_oldest_inbound_handshake_is_evicted) {
  auto l = ledger(2);
  BOOST_TEST(l.on_step(7, &s1, true, progress::waiting_for_peer, t0).evicted.empty());
  BOOST_TEST(l.on_step(8, &s2, true, progress::waiting_for_peer, t0 + 1s).evicted.empty());
  l.on_step(20, &s3, false, progress::waiting_for_peer, t0 + 1s);  // an outbound one: not capped
  const auto r = l.on_step(9, &s3, true, progress::waiting_for_peer, t0 + 2s);
  BOOST_TEST(r.evicted == std::vector<int>{7});
  BOOST_TEST(l.condemned(7));
  BOOST_TEST(!l.may_continue(7, t0 + 2s));
  BOOST_TEST(l.pending_accepts() == 2u);
}

BOOST_AUTO_TEST_CASE(over_the_cap_a_handshake_that_heard_from_its_peer_outlives_silent_ones) {
  int s4 = 0;
  auto l = ledger(2);
  // The oldest has received its peer's first message (on a later call); the next is silent.
  l.on_step(7, &s1, true, progress::waiting_for_peer, t0);
  l.on_step(7, &s1, true, progress::waiting_for_peer, t0 + 10ms, true);
  l.on_step(8, &s2, true, progress::waiting_for_peer, t0 + 1s);
  BOOST_TEST(l.on_step(9, &s3, true, progress::waiting_for_peer, t0 + 2s).evicted == std::vector<int>{8});
  // When every other one has heard from its peer, the oldest goes.
  l.on_step(9, &s3, true, progress::waiting_for_peer, t0 + 2s, true);
  BOOST_TEST(l.on_step(10, &s4, true, progress::waiting_for_peer, t0 + 3s).evicted == std::vector<int>{7});
}

BOOST_AUTO_TEST_CASE(a_new_session_on_a_reused_socket_starts_a_new_handshake) {
  auto l = ledger();
  l.on_step(7, &s1, true, progress::waiting_for_peer, t0);
  l.take_expired(t0 + 10s);
  BOOST_TEST(l.condemned(7));
  l.forget(7, &s2);  // another session's free does not touch it
  BOOST_TEST(l.condemned(7));
  l.on_step(7, &s2, true, progress::waiting_for_peer, t0 + 20s);
  BOOST_TEST(!l.condemned(7));
  BOOST_TEST(l.may_continue(7, t0 + 25s));
}

BOOST_AUTO_TEST_CASE(a_finished_or_failed_handshake_leaves_the_ledger) {
  auto l = ledger();
  l.on_step(7, &s1, true, progress::waiting_for_peer, t0);
  l.on_step(8, &s2, true, progress::waiting_for_peer, t0);
  l.on_step(7, &s1, true, progress::finished, t0);
  l.on_step(8, &s2, true, progress::failed, t0);
  BOOST_TEST(l.pending_accepts() == 0u);
  BOOST_TEST(!l.time_to_next_deadline(t0).has_value());
}

BOOST_AUTO_TEST_CASE(process_limits_are_read_back) {
  set_handshake_limits({2500ms, 8});
  const auto l = current_handshake_limits();
  BOOST_TEST(l.deadline.count() == 2500);
  BOOST_TEST(l.max_pending_accepts == 8u);
}
