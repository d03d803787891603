// ring_lanes: a ring member's bulk lanes, with hand-driven lane ends
// (tests/support/hand_lanes.hpp). Pieces go on the lane to the next member only once it
// is open, each under a ticket of its own, values moved and named by their descriptor; a
// piece in a mailbox, or smaller than lane::min_bytes (none without values), stays as it is
// and goes in its message. The receiver hands on pieces in
// the order their messages came, each once its payload is here, whether the payload came
// first or last; a piece in the message behind one that waits, waits too. A message
// naming a payload of a lane never offered, or of one that closed, fails with stage_lost;
// a lane that closes with nothing in flight does not; a payload of the wrong size, values
// twice, and payloads past the bound fail with malformed.
#define BOOST_TEST_MODULE ring_lanes
#include <boost/test/unit_test.hpp>
#include <memory>
#include <vector>

#include "core/ring_lanes.hpp"
#include "tests/support/hand_lanes.hpp"

using namespace troupe;

namespace {

constexpr std::uint32_t next = 1;
constexpr std::int64_t big = lane::min_bytes / sizeof(float);  // the smallest piece a lane takes

ring_piece with_values(std::int64_t numel, float v, std::int64_t offset = 0) {
  ring_piece p;
  p.offset = offset;
  p.values = tensor({numel});
  for (std::int64_t i = 0; i < numel; ++i) p.values.data<float>()[i] = v;
  return p;
}

// The pieces a delivery hands on; fails the test on a fault.
std::vector<ring_piece> ready(ring_lanes::delivery d) {
  if (auto* f = std::get_if<fault>(&d)) BOOST_FAIL("unexpected fault: " << to_string(*f));
  return std::move(std::get<std::vector<ring_piece>>(d));
}

std::string fault_of(const ring_lanes::delivery& d) {
  const auto* f = std::get_if<fault>(&d);
  return f ? to_string(*f) : std::string();
}

// A piece as it crosses: sent on `sender`'s lane, its message and payload recorded.
struct crossing {
  ring_piece message;
  std::uint64_t ticket = 0;
  tensor payload;
};

struct lane_pair {
  std::shared_ptr<test::hand_member_lanes> out = std::make_shared<test::hand_member_lanes>();
  std::shared_ptr<test::hand_lanes> in = std::make_shared<test::hand_lanes>();
  ring_lanes sender, receiver;

  lane_pair() {
    sender.asked(out);
    out->open_to.insert(next);
    sender.out_opened();
    receiver.listen(in);
    receiver.in_offered();
  }
  crossing cross(ring_piece p) {
    sender.onto_lane(p, next);
    BOOST_REQUIRE(!out->sent.empty());
    auto& [to, ticket, t] = out->sent.back();
    BOOST_TEST(to == next);
    return crossing{std::move(p), ticket, std::move(t)};
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(pieces_go_on_the_lane_only_once_it_is_open_each_under_its_own_ticket) {
  auto out = std::make_shared<test::hand_member_lanes>();
  ring_lanes lanes;
  BOOST_TEST((lanes.out() == ring_lanes::out_state::unasked));
  ring_piece p = with_values(big, 1.f);
  lanes.onto_lane(p, next);  // not asked
  BOOST_TEST(!p.values.empty());
  lanes.asked(out);
  out->open_to.insert(next);
  lanes.onto_lane(p, next);  // asked, not open
  BOOST_TEST(!p.values.empty());
  lanes.out_opened();
  lanes.onto_lane(p, next);
  BOOST_TEST(p.values.empty());
  BOOST_TEST(p.lane.ticket == 1u);
  BOOST_TEST(p.lane.dims == std::vector<std::int64_t>({big}), boost::test_tools::per_element());
  ring_piece q = with_values(big, 2.f);
  lanes.onto_lane(q, next);
  BOOST_TEST(q.lane.ticket == 2u);
  ring_piece in_mailbox = with_values(big, 3.f);
  in_mailbox.shared.segment = "a-mailbox";
  lanes.onto_lane(in_mailbox, next);
  BOOST_TEST(in_mailbox.lane.empty());
  ring_piece empty, small = with_values(big - 1, 5.f);
  lanes.onto_lane(empty, next);
  BOOST_TEST(empty.lane.empty());
  lanes.onto_lane(small, next);
  BOOST_TEST(small.lane.empty());
  BOOST_TEST(small.values.numel() == big - 1);
  BOOST_TEST(out->sent.size() == 2u);
  BOOST_TEST(lanes.out_closed());
  BOOST_TEST(!lanes.out_closed());  // closed already
  ring_piece after = with_values(big, 4.f);
  lanes.onto_lane(after, next);
  BOOST_TEST(!after.values.empty());
}

BOOST_AUTO_TEST_CASE(pieces_come_out_in_the_order_of_their_messages_whenever_their_payloads_come) {
  lane_pair lp;
  crossing a = lp.cross(with_values(big, 1.f, 0));
  crossing b = lp.cross(with_values(big, 2.f, big));
  ring_piece c = with_values(4, 3.f, 2 * big);  // small: in its message, behind the others
  lp.sender.onto_lane(c, next);
  BOOST_TEST(c.lane.empty());
  BOOST_TEST(ready(lp.receiver.take(std::move(a.message), "worker 0")).empty());
  BOOST_TEST(ready(lp.receiver.payload(b.ticket, std::move(b.payload), "worker 0")).empty());  // before its message
  BOOST_TEST(ready(lp.receiver.take(std::move(b.message), "worker 0")).empty());
  BOOST_TEST(ready(lp.receiver.take(std::move(c), "worker 0")).empty());  // waits behind a
  auto out = ready(lp.receiver.payload(a.ticket, std::move(a.payload), "worker 0"));
  BOOST_REQUIRE(out.size() == 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(out[i].offset == static_cast<std::int64_t>(i) * big);
    BOOST_TEST(out[i].lane.empty());
    BOOST_REQUIRE(out[i].values.numel() == (i < 2 ? big : 4));
    BOOST_TEST(out[i].values.data<float>()[3] == static_cast<float>(i + 1));
  }
  // With nothing waiting, a piece in its message goes at once.
  BOOST_TEST(ready(lp.receiver.take(with_values(2, 5.f), "worker 0")).size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_payload_that_will_never_come_fails_with_stage_lost) {
  {
    ring_lanes never;  // no lane was offered
    lane_pair lp;
    crossing a = lp.cross(with_values(big, 1.f));
    BOOST_TEST(fault_of(never.take(std::move(a.message), "worker 2")) ==
               "stage_lost: a ring piece from worker 2 names a payload on a bulk lane that was never offered; is "
               "that node still up?");
  }
  lane_pair lp;
  crossing a = lp.cross(with_values(big, 1.f));
  BOOST_TEST(ready(lp.receiver.take(std::move(a.message), "worker 2")).empty());
  BOOST_TEST(fault_of(lp.receiver.in_closed("reset by peer", "worker 2")) ==
             "stage_lost: a ring piece from worker 2 names a payload on a bulk lane that closed (reset by peer); is "
             "that node still up?");
}

BOOST_AUTO_TEST_CASE(a_lane_that_closes_with_nothing_in_flight_is_no_error) {
  lane_pair lp;
  crossing a = lp.cross(with_values(big, 1.f));
  BOOST_TEST(ready(lp.receiver.payload(a.ticket, std::move(a.payload), "worker 0")).empty());
  BOOST_TEST(ready(lp.receiver.take(std::move(a.message), "worker 0")).size() == 1u);
  BOOST_TEST(ready(lp.receiver.in_closed("the neighbour finished", "worker 0")).empty());
}

BOOST_AUTO_TEST_CASE(what_does_not_fit_or_comes_twice_or_past_the_bound_fails_with_malformed) {
  {
    lane_pair lp;
    crossing a = lp.cross(with_values(big, 1.f));
    BOOST_TEST(ready(lp.receiver.payload(a.ticket, tensor({big - 1}), "worker 0")).empty());
    BOOST_TEST(fault_of(lp.receiver.take(std::move(a.message), "worker 0"))
                   .find("malformed: a ring piece from worker 0 on the bulk lane: ") == 0u);
  }
  {
    lane_pair lp;
    crossing a = lp.cross(with_values(big, 1.f));
    a.message.values = tensor({big});
    BOOST_TEST(fault_of(lp.receiver.take(std::move(a.message), "worker 0"))
                   .find("malformed: a ring piece from worker 0 carries its values both in the message") == 0u);
  }
  lane_pair lp;
  for (std::uint64_t t = 1; t <= ring_lanes::max_early_payloads; ++t)
    BOOST_REQUIRE(ready(lp.receiver.payload(t, tensor({1}), "worker 0")).empty());
  BOOST_TEST(fault_of(lp.receiver.payload(0, tensor({1}), "worker 0")) ==
             "malformed: worker 0 sent more than 4096 ring payloads that no message named; run one troupe build on "
             "every node");
}
