// ring_link: two ring members' links on real mailboxes in this process. Before an outbox
// is accepted every piece goes in the message and the core computes in fresh tensors;
// once accepted, a piece computed where the link said crosses bit-exactly through the
// outbox, and a piece too small for a slot goes in the message; a piece that finds no room
// waits, later ones wait behind it (small ones too, and none is computed in the outbox),
// and drain sends them in order once the receiver lets go; a
// refused outbox sends pieces in the messages; an answer about a mailbox never offered is
// ignored; the receiver refuses a second offer, an offer without the fast path, and a piece
// naming a mailbox it never mapped or carrying its values twice; the pieces waiting for a
// next member that is gone are dropped.
#define BOOST_TEST_MODULE ring_link
#include <boost/test/unit_test.hpp>

#include <vector>

#include "core/ring_link.hpp"
#include "tests/support/numeric.hpp"
#include "tests/support/shm_tag.hpp"

using namespace troupe;
using test::same_bits;

namespace {

constexpr std::uint64_t sender_label = 3;
constexpr std::int64_t n = ring_link::min_mailbox_numel;  // the smallest piece a mailbox takes

tensor ramp(std::int64_t numel, float start) {
  tensor t({numel});
  for (std::int64_t i = 0; i < numel; ++i) t.data<float>()[i] = start + 0.5f * static_cast<float>(i);
  return t;
}

ring_piece piece_of(tensor values, std::int64_t offset) {
  ring_piece p;
  p.offset = offset;
  p.values = std::move(values);
  return p;
}

// A sender's link with an outbox of room for `pieces` pieces, offered to and taken by a
// receiver's link (unless `accept` is false, when it is refused).
struct linked_pair {
  std::string tag = test::fresh_shm_tag();
  ring_link sender, receiver;
  std::vector<ring_piece> sent;  // what the sender's shell sent, in order
  ring_link::sender send = [this](ring_piece& p) { sent.push_back(std::move(p)); };

  explicit linked_pair(double pieces, bool accept = true) {
    auto segment =
        sender.make_outbox(tag, static_cast<std::size_t>(pieces * shm::ring_outbox::bytes_for(n)), sender_label);
    BOOST_REQUIRE_MESSAGE(segment.has_value(), (segment ? std::string() : segment.error().message));
    BOOST_TEST(sender.piece_buffer(n).empty());  // not before the answer
    if (accept) {
      const auto why = receiver.take_offer(*segment, tag, sender_label);
      BOOST_REQUIRE_MESSAGE(!why, why.value_or(""));
    }
    BOOST_TEST((sender.take_answer(*segment, accept) ==
                (accept ? ring_link::answer::accepted : ring_link::answer::refused)));
    BOOST_TEST((sender.take_answer(*segment, accept) == ring_link::answer::ignored));  // answered already
  }
  // The receiver's side of sent piece i: its values, from the mailbox or the message.
  tensor received(std::size_t i) {
    ring_piece p = std::move(sent.at(i));
    const auto problem = receiver.fill(p);
    BOOST_REQUIRE_MESSAGE(!problem, problem.value_or(""));
    return std::move(p.values);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(before_an_outbox_pieces_go_in_the_message_and_the_core_computes_in_fresh_tensors) {
  ring_link link;
  BOOST_TEST(link.piece_buffer(n).empty());
  std::vector<ring_piece> sent;
  BOOST_TEST(!link.pass(piece_of(ramp(n, 1.f), 0), [&](ring_piece& p) { sent.push_back(std::move(p)); }));
  BOOST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].shared.empty());
  BOOST_TEST(same_bits(sent[0].values, ramp(n, 1.f)));
  BOOST_TEST((link.take_answer("no-such-mailbox", true) == ring_link::answer::ignored));
}

BOOST_AUTO_TEST_CASE(a_piece_computed_where_the_link_said_crosses_the_outbox_bit_exactly) {
  linked_pair p(4);
  tensor buffer = p.sender.piece_buffer(n);
  BOOST_REQUIRE(buffer.numel() == n);
  const tensor want = ramp(n, -3.f);
  for (std::int64_t i = 0; i < n; ++i) buffer.data<float>()[i] = want.data<float>()[i];
  BOOST_TEST(!p.sender.pass(piece_of(std::move(buffer), 64), p.send));
  BOOST_TEST(!p.sender.pass(piece_of(ramp(n, 7.f), 320), p.send));  // computed aside: copied in
  BOOST_TEST(p.sender.piece_buffer(n - 1).empty());  // too small for a slot
  BOOST_TEST(!p.sender.pass(piece_of(ramp(n - 1, 2.f), 0), p.send));
  BOOST_REQUIRE(p.sent.size() == 3u);
  BOOST_TEST(!p.sent[0].shared.empty());
  BOOST_TEST(p.sent[0].values.empty());
  BOOST_TEST(p.sent[0].offset == 64);
  BOOST_TEST(p.sent[2].shared.empty());  // in the message
  BOOST_TEST(same_bits(p.received(0), want));
  BOOST_TEST(same_bits(p.received(1), ramp(n, 7.f)));
  BOOST_TEST(same_bits(p.received(2), ramp(n - 1, 2.f)));
}

BOOST_AUTO_TEST_CASE(pieces_without_room_wait_in_order_and_drain_once_the_receiver_lets_go) {
  linked_pair p(2);
  BOOST_TEST(!p.sender.pass(piece_of(ramp(n, 0.f), 0), p.send));
  BOOST_TEST(!p.sender.pass(piece_of(ramp(n, 1.f), n), p.send));
  tensor first = p.received(0);  // held by the receiver: its space is not released yet
  BOOST_TEST(p.sender.pass(piece_of(ramp(n, 2.f), 2 * n), p.send));  // no room: it waits
  BOOST_TEST(p.sender.waiting());
  BOOST_TEST(p.sender.piece_buffer(n).empty());  // a piece computed now would overtake it
  BOOST_TEST(p.sender.pass(piece_of(ramp(n, 3.f), 3 * n), p.send));  // behind it
  BOOST_TEST(p.sender.pass(piece_of(ramp(8, 4.f), 4 * n), p.send));  // small, and behind them too
  BOOST_TEST(p.sent.size() == 2u);
  BOOST_TEST(p.sender.drain(p.send));  // still no room
  tensor second = p.received(1);
  first = tensor();
  second = tensor();  // the receiver lets go of both
  BOOST_TEST(!p.sender.drain(p.send));
  BOOST_REQUIRE(p.sent.size() == 5u);
  BOOST_TEST(p.sent[2].offset == 2 * n);
  BOOST_TEST(p.sent[3].offset == 3 * n);
  BOOST_TEST(p.sent[4].offset == 4 * n);
  BOOST_TEST(p.sent[4].shared.empty());
  BOOST_TEST(same_bits(p.received(2), ramp(n, 2.f)));
  BOOST_TEST(same_bits(p.received(3), ramp(n, 3.f)));
  BOOST_TEST(same_bits(p.received(4), ramp(8, 4.f)));
}

BOOST_AUTO_TEST_CASE(a_refused_outbox_sends_pieces_in_the_messages) {
  linked_pair p(4, false);
  BOOST_TEST(p.sender.outbox_bytes() == 0u);
  BOOST_TEST(p.sender.piece_buffer(n).empty());
  BOOST_TEST(!p.sender.pass(piece_of(ramp(n, 5.f), 0), p.send));
  BOOST_REQUIRE(p.sent.size() == 1u);
  BOOST_TEST(p.sent[0].shared.empty());
  BOOST_TEST(same_bits(p.received(0), ramp(n, 5.f)));
}

BOOST_AUTO_TEST_CASE(the_receiver_refuses_what_it_cannot_take) {
  linked_pair p(4);
  ring_link other;
  auto segment = other.make_outbox(p.tag, shm::ring_outbox::bytes_for(n) * 2, sender_label);
  BOOST_REQUIRE(segment.has_value());
  BOOST_TEST(p.receiver.take_offer(*segment, p.tag, sender_label).has_value());  // maps one already
  BOOST_TEST(ring_link().take_offer(*segment, "", sender_label).value_or("").find("fast path") != std::string::npos);
  BOOST_TEST(!p.sender.pass(piece_of(ramp(n, 1.f), 0), p.send));
  ring_piece unmapped = p.sent[0];
  BOOST_TEST(ring_link().fill(unmapped).value_or("").find("never mapped") != std::string::npos);
  ring_piece twice = p.sent[0];
  twice.values = ramp(n, 1.f);
  BOOST_TEST(p.receiver.fill(twice).value_or("").find("both") != std::string::npos);
  ring_piece plain = piece_of(ramp(n, 4.f), 0);
  BOOST_TEST(!p.receiver.fill(plain).has_value());  // in the message: nothing to fill
  BOOST_TEST(same_bits(plain.values, ramp(n, 4.f)));
}

BOOST_AUTO_TEST_CASE(pieces_waiting_for_a_next_member_that_is_gone_are_dropped) {
  linked_pair p(1);
  BOOST_TEST(!p.sender.pass(piece_of(ramp(n, 0.f), 0), p.send));
  tensor held = p.received(0);
  BOOST_TEST(p.sender.pass(piece_of(ramp(n, 1.f), n), p.send));
  p.sender.drop_waiting();
  BOOST_TEST(!p.sender.waiting());
  BOOST_TEST(!p.sender.drain(p.send));
  BOOST_TEST(p.sent.size() == 1u);
}
