// Tests for actors/member_lanes.hpp under CAF's deterministic scheduler, with a real shard
// server whose lane end and the member's are driven by hand: a lane is asked for once,
// when a call is first large enough, and carries only large tensors once open; a refused
// offer keeps tensors in the messages; an answer meets its payload whichever comes first
// and reaches the member with its values; an answer in the message passes through; one
// that names a payload nobody asked for, or whose payload does not fit, fails with the
// reason; a lane that closes fails the answers waiting on it as from a lost shard and
// stays off; an abandoned answer's payload is dropped; a lost member fails them all; a
// collective's answer takes the same lane and tickets as a pull's.
#define BOOST_TEST_MODULE member_lanes
#include <boost/test/unit_test.hpp>

#include <variant>

#include "actors/member_lanes.hpp"
#include "tests/support/hand_lanes.hpp"
#include "tests/support/shard_fixture.hpp"

using namespace troupe;
using test::filled;
using test::numel;

namespace {

using lanes_t = lane::member_lanes<kv_pull_reply, &kv_pull_reply::data>;
using answer = std::variant<kv_pull_reply, fault>;

constexpr std::size_t big = lane::min_bytes;  // the smallest call a lane carries
constexpr std::size_t small = lane::min_bytes - 4;

struct fixture : test::shard_fixture {
  std::shared_ptr<test::hand_lanes> shard_lanes = std::make_shared<test::hand_lanes>();
  std::shared_ptr<test::hand_member_lanes> end = std::make_shared<test::hand_member_lanes>();
  lanes_t lanes{end, 1, "test member"};
  std::vector<answer> answers;

  // with_lanes: whether the shard has a lane end (one without refuses every offer).
  explicit fixture(bool with_lanes = true) {
    boot(sync_mode::async, [](job_spec& j) { j.request_timeout_ms = 5000; }, with_lanes ? shard_lanes : nullptr);
    start();
    lanes.start(caf::actor_cast<caf::actor_addr>(as(0)));
  }
  // Member 0 asks shard 0 (at host "shard-host") for a lane for a call of `bytes`.
  void ask(std::size_t bytes) {
    auto s = shard;
    auto* l = &lanes;
    run_as(as(0), [=](caf::event_based_actor* self) {
      l->maybe_ask(self, s, 0, 0, "shard-host", std::chrono::seconds(5), bytes);
    });
    sched->run();
  }
  // An open lane to shard 0.
  void open() {
    ask(big);
    end->open_to.insert(0);
    lanes.on_event({0, true, {}});
  }
  lanes_t::done_fn record() {
    return [this](answer a) { answers.push_back(std::move(a)); };
  }
  // A reply of shard 0 that names `ticket`'s payload of n floats.
  static kv_pull_reply on_lane(std::uint64_t ticket, std::int64_t n = numel) {
    kv_pull_reply r;
    r.lane = lane_tensor{ticket, 0, {n}};
    return r;
  }
  void payload(std::uint64_t ticket, tensor t) {
    lane_payload p{0, ticket, std::move(t), false};
    lanes.on_payload(p);
  }
  const fault& fault_at(std::size_t i) const {
    BOOST_REQUIRE(i < answers.size());
    BOOST_REQUIRE(std::holds_alternative<fault>(answers[i]));
    return std::get<fault>(answers[i]);
  }
  const kv_pull_reply& reply_at(std::size_t i) const {
    BOOST_REQUIRE(i < answers.size());
    BOOST_REQUIRE(std::holds_alternative<kv_pull_reply>(answers[i]));
    return std::get<kv_pull_reply>(answers[i]);
  }
};

struct fixture_without_shard_lanes : fixture {
  fixture_without_shard_lanes() : fixture(false) {}
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_lane_is_asked_for_once_and_carries_only_large_tensors_once_open, fixture) {
  ask(small);
  BOOST_TEST(shard_lanes->offered.empty());  // too small to need a lane
  ask(big);
  BOOST_TEST(shard_lanes->offered == std::vector<std::uint32_t>{0});
  BOOST_REQUIRE(end->opened.size() == 1u);
  BOOST_TEST(end->opened[0].second == "shard-host");
  ask(big);
  BOOST_TEST(shard_lanes->offered.size() == 1u);  // asked once
  tensor t = filled(1.f);
  BOOST_TEST(lanes.reply_ticket(0, big) == 0u);  // not open yet
  BOOST_TEST(!lanes.send(0, t).has_value());
  BOOST_TEST(t.numel() == numel);  // untouched
  end->open_to.insert(0);
  lanes.on_event({0, true, {}});
  const auto first = lanes.reply_ticket(0, big);
  BOOST_TEST(first > 0u);
  BOOST_TEST(lanes.reply_ticket(0, small) == 0u);
  tensor large = tensor::uninitialized({static_cast<std::int64_t>(big / sizeof(float))});
  auto d = lanes.send(0, large);
  BOOST_REQUIRE(d.has_value());
  BOOST_TEST(d->ticket > first);
  BOOST_TEST(d->dims == std::vector<std::int64_t>{static_cast<std::int64_t>(big / sizeof(float))});
  BOOST_REQUIRE(end->sent.size() == 1u);
  BOOST_TEST(std::get<1>(end->sent[0]) == d->ticket);
  BOOST_TEST(!lanes.send(0, t).has_value());  // a small tensor stays in the message
}

BOOST_FIXTURE_TEST_CASE(a_refused_offer_keeps_tensors_in_the_messages, fixture_without_shard_lanes) {
  ask(big);
  BOOST_TEST(end->opened.empty());
  lanes.on_event({0, true, {}});  // a stray report changes nothing: no lane was being opened
  BOOST_TEST(lanes.reply_ticket(0, big) == 0u);
}

BOOST_FIXTURE_TEST_CASE(an_answer_meets_its_payload_whichever_comes_first, fixture) {
  open();
  const auto t1 = lanes.reply_ticket(0, big), t2 = lanes.reply_ticket(0, big);
  lanes.on_reply(0, t1, on_lane(t1), record());
  BOOST_TEST(answers.empty());  // waits for its payload
  payload(t1, filled(2.f));
  BOOST_TEST(reply_at(0).data.data<float>()[numel - 1] == 2.f);
  BOOST_TEST(reply_at(0).lane.empty());
  payload(t2, filled(3.f));  // before its reply
  lanes.on_reply(0, t2, on_lane(t2), record());
  BOOST_TEST(reply_at(1).data.data<float>()[0] == 3.f);
}

// A collective's answer (another kind of reply) meets its payload on the same lane and
// tickets as a pull's, and a closing lane fails it as it fails a pull's.
BOOST_FIXTURE_TEST_CASE(a_collective_s_answer_meets_its_payload_on_the_same_lane, fixture) {
  open();
  const auto pull = lanes.reply_ticket(0, big), coll = lanes.reply_ticket(0, big), lost = lanes.reply_ticket(0, big);
  BOOST_TEST(pull != coll);
  std::vector<std::variant<kv_collective_reply, fault>> got;
  auto keep = [&](std::variant<kv_collective_reply, fault> a) { got.push_back(std::move(a)); };
  kv_collective_reply r;
  r.ranks = {0, 1};
  r.lane = lane_tensor{coll, 0, {numel}};
  lanes.on_reply_of<kv_collective_reply, &kv_collective_reply::data>(0, coll, r, keep);
  lanes.on_reply(0, pull, on_lane(pull), record());
  payload(coll, filled(5.f));
  BOOST_REQUIRE(got.size() == 1u);
  BOOST_REQUIRE(std::holds_alternative<kv_collective_reply>(got[0]));
  const auto& answer = std::get<kv_collective_reply>(got[0]);
  BOOST_TEST(answer.data.numel() == numel);
  BOOST_TEST(answer.data.data<float>()[numel - 1] == 5.f);
  BOOST_TEST(answer.lane.empty());
  BOOST_TEST((answer.ranks == std::vector<std::uint32_t>{0, 1}));
  BOOST_TEST(answers.empty());  // the pull's payload has not come
  r.lane.ticket = lost;
  lanes.on_reply_of<kv_collective_reply, &kv_collective_reply::data>(0, lost, r, keep);
  lanes.on_event({0, false, "gone"});
  BOOST_REQUIRE(got.size() == 2u);
  BOOST_TEST((std::get<fault>(got[1]).code == errc::shard_lost));
  BOOST_TEST((fault_at(0).code == errc::shard_lost));
}

BOOST_FIXTURE_TEST_CASE(an_answer_in_the_message_passes_through, fixture) {
  open();
  kv_pull_reply r;
  r.data = filled(4.f);
  lanes.on_reply(0, lanes.reply_ticket(0, big), std::move(r), record());  // the shard's lane closed meanwhile
  BOOST_TEST(reply_at(0).data.data<float>()[0] == 4.f);
}

BOOST_FIXTURE_TEST_CASE(an_answer_naming_a_payload_nobody_asked_for_fails, fixture) {
  open();
  const auto t = lanes.reply_ticket(0, big);
  lanes.on_reply(0, t, on_lane(t + 1), record());
  lanes.on_reply(0, 0, on_lane(t), record());
  for (std::size_t i = 0; i < 2; ++i) {
    BOOST_TEST((fault_at(i).code == errc::malformed));
    BOOST_TEST(contains(fault_at(i).detail, "did not ask for"), fault_at(i).detail);
  }
}

BOOST_FIXTURE_TEST_CASE(a_payload_that_does_not_fit_its_descriptor_fails_the_answer, fixture) {
  open();
  const auto t = lanes.reply_ticket(0, big);
  lanes.on_reply(0, t, on_lane(t, numel + 1), record());
  payload(t, filled(1.f));
  BOOST_TEST((fault_at(0).code == errc::malformed));
  BOOST_TEST(contains(fault_at(0).detail, "shard 0's answer on the bulk lane"), fault_at(0).detail);
}

BOOST_FIXTURE_TEST_CASE(a_closing_lane_fails_the_waiting_answers_and_stays_off, fixture) {
  open();
  const auto t1 = lanes.reply_ticket(0, big), t2 = lanes.reply_ticket(0, big);
  lanes.on_reply(0, t1, on_lane(t1), record());
  lanes.on_reply(0, t2, on_lane(t2), record());
  lanes.on_event({0, false, "reset by peer"});
  BOOST_REQUIRE(answers.size() == 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    BOOST_TEST((fault_at(i).code == errc::shard_lost));
    BOOST_TEST(contains(fault_at(i).detail, "the bulk lane to shard 0 closed: reset by peer"), fault_at(i).detail);
  }
  BOOST_TEST(lanes.reply_ticket(0, big) == 0u);
  tensor large = tensor::uninitialized({static_cast<std::int64_t>(big / sizeof(float))});
  BOOST_TEST(!lanes.send(0, large).has_value());
  ask(big);
  BOOST_TEST(shard_lanes->offered.size() == 1u);  // not asked again
}

BOOST_FIXTURE_TEST_CASE(an_abandoned_answer_s_payload_is_dropped_and_a_lost_member_fails_the_rest, fixture) {
  open();
  const auto gone = lanes.reply_ticket(0, big), waiting = lanes.reply_ticket(0, big);
  lanes.abandon(0, gone);
  payload(gone, filled(1.f));
  lanes.on_reply(0, gone, on_lane(gone), record());  // a late reply finds no payload kept: it waits
  BOOST_TEST(answers.empty());
  lanes.on_reply(0, waiting, on_lane(waiting), record());
  lanes.fail_all({errc::shard_lost, "the job's coordinator went away"});
  BOOST_REQUIRE(answers.size() == 2u);  // both waiting answers fail
  BOOST_TEST(fault_at(0).detail == "the job's coordinator went away");
  BOOST_TEST(fault_at(1).detail == "the job's coordinator went away");
}
