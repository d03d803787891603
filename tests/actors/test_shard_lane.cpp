// Tests for actors/shard_lane.cpp under CAF's deterministic scheduler, with a lane end the
// test drives by hand: a push whose payload comes before or after its message is applied
// as an inline one would be, and holds only its own member's later calls; a payload that
// does not fit its descriptor, never comes, or whose lane closes fails its push with the
// reason and lets the member's next calls through; a pull that asks is answered on the
// lane; the lane reader's finding that a payload is finite reaches the core; offers go
// only to the rank's own actor; a member that floods unnamed payloads
// loses its lane, and one that leaves has what it left waiting answered.
#define BOOST_TEST_MODULE shard_lane
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "monitoring/refusals.hpp"
#include "tests/support/hand_lanes.hpp"
#include "tests/support/shard_fixture.hpp"

using namespace troupe;
using test::filled;
using test::numel;

namespace {

using test::hand_lanes;

struct fixture : test::shard_fixture {
  std::shared_ptr<hand_lanes> lanes = std::make_shared<hand_lanes>();

  void boot_with_lanes(sync_mode mode) {
    boot(mode, [](job_spec& j) { j.request_timeout_ms = 5000; }, lanes);
    start();
  }
  // Worker's push at `clock` whose gradient travels on the lane under `ticket`.
  void push_on_lane(std::uint32_t worker, std::int64_t clock, std::uint64_t ticket) {
    kv_push p = step_push(0, worker, 0, clock, clock, tensor());
    p.lane = lane_tensor{ticket, 0, {numel}};
    send_push(as(worker), p);
  }
  // `finite`: what the lane reader found (Note [Scanned on arrival]).
  void payload(std::uint32_t worker, std::uint64_t ticket, tensor t, bool finite = false) {
    lanes->h.payload(worker, ticket, {std::move(t), finite});
  }
};

// The parameters a snapshot or a pull's answer carries.
std::vector<float> values(const tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }
std::vector<float> values(const params_reply& r) { return values(r.params); }
std::vector<float> values(const kv_pull_reply& r) { return values(r.data); }

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_payload_before_or_after_its_message_is_applied_as_an_inline_push, fixture) {
  boot_with_lanes(sync_mode::async);
  const auto initial = values(snapshot());
  payload(0, 7, filled(1.f));  // came first
  push_on_lane(0, 0, 7);
  sched->run();
  BOOST_REQUIRE(rec.acks.size() == 1u);
  push_on_lane(0, 1, 8);  // its payload is still on the way
  sched->run();
  BOOST_TEST(rec.acks.size() == 1u);
  payload(0, 8, filled(2.f));
  sched->run();
  BOOST_REQUIRE(rec.acks.size() == 2u);
  BOOST_TEST(rec.errors.empty());
  const auto now = values(snapshot());
  for (std::int64_t i = 0; i < numel; ++i) BOOST_TEST(now[i] == initial[i] - 3.f);
}

// Note [Scanned on arrival]: a payload the reader did not vouch for is scanned by the
// core and refused with NaN in it; the reader's word that one is finite reaches the core,
// which then does not scan it (the NaN stands for bytes the core must not read twice).
BOOST_FIXTURE_TEST_CASE(the_reader_s_scan_reaches_the_core_and_an_unscanned_nan_is_refused, fixture) {
  boot_with_lanes(sync_mode::async);
  const auto initial = values(snapshot());
  tensor poisoned = filled(1.f);
  poisoned.data<float>()[numel / 2] = std::numeric_limits<float>::quiet_NaN();
  payload(0, 1, tensor(poisoned), false);
  push_on_lane(0, 0, 1);
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::not_finite));
  BOOST_TEST(values(snapshot()) == initial);
  payload(0, 2, tensor(poisoned), true);
  push_on_lane(0, 1, 2);
  sched->run();
  BOOST_TEST(rec.errors.size() == 1u);
  BOOST_TEST(rec.acks.size() == 1u);
  BOOST_TEST(std::isnan(values(snapshot())[numel / 2]));
}

BOOST_FIXTURE_TEST_CASE(a_push_that_waits_holds_its_own_member_s_calls_only, fixture) {
  boot_with_lanes(sync_mode::async);
  const auto initial = values(snapshot());
  push_on_lane(0, 0, 1);
  pull(0, 1);  // worker 0's pull must see its own push
  pull(1, 0);  // worker 1 is not held
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 1u);
  BOOST_TEST(values(rec.params[0]) == initial);
  payload(0, 1, filled(1.f));
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 2u);
  BOOST_TEST(rec.acks.size() == 1u);
  for (std::int64_t i = 0; i < numel; ++i) BOOST_TEST(values(rec.params[1])[i] == initial[i] - 1.f);
}

BOOST_FIXTURE_TEST_CASE(a_payload_that_does_not_fit_is_refused_as_malformed_and_changes_nothing, fixture) {
  boot_with_lanes(sync_mode::async);
  const auto initial = values(snapshot());
  payload(0, 3, tensor({numel + 1}));
  push_on_lane(0, 0, 3);
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::malformed));
  BOOST_TEST(describe(rec.errors[0]).find("lane payload") != std::string::npos, describe(rec.errors[0]));
  BOOST_TEST(values(snapshot()) == initial);
  push(0, 1, filled(1.f));  // the refused push counted: the worker's next clock is taken
  sched->run();
  BOOST_TEST(rec.acks.size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(an_overdue_payload_fails_its_push_and_lets_the_next_calls_through, fixture) {
  boot_with_lanes(sync_mode::async);
  const auto initial = values(snapshot());
  push_on_lane(0, 0, 5);
  pull(0, 1);
  sched->run();
  BOOST_TEST(rec.errors.empty());
  BOOST_TEST(rec.params.empty());
  sched->trigger_timeouts();  // the job's request timeout passes
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST(describe(rec.errors[0]).find("did not come") != std::string::npos, describe(rec.errors[0]));
  BOOST_REQUIRE(rec.params.size() == 1u);
  BOOST_TEST(values(rec.params[0]) == initial);
  payload(0, 5, filled(9.f));  // comes late: dropped, never applied
  sched->run();
  BOOST_TEST(values(snapshot()) == initial);
  push(0, 1, filled(1.f));  // the refused push counted: the worker's next clock is taken
  sched->run();
  BOOST_TEST(rec.acks.size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_closed_lane_fails_what_waits_for_it_and_later_lane_pushes, fixture) {
  boot_with_lanes(sync_mode::async);
  push_on_lane(0, 0, 1);
  pull(0, 1);
  sched->run();
  lanes->h.closed(0, "closed by the peer");
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST(describe(rec.errors[0]).find("lane closed") != std::string::npos, describe(rec.errors[0]));
  BOOST_TEST(rec.params.size() == 1u);  // the pull behind it was served
  push_on_lane(0, 1, 2);                // the member has not heard yet
  sched->run();
  BOOST_TEST(rec.errors.size() == 2u);
  push(0, 2, filled(1.f));  // in the message, as after the member hears
  sched->run();
  BOOST_TEST(rec.acks.size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_pull_that_asks_is_answered_on_the_open_lane, fixture) {
  boot_with_lanes(sync_mode::async);
  const auto initial = values(snapshot());
  kv_pull q = step_pull(0, 0, 0, 0);
  q.lane_reply = 11;
  send_pull(as(0), q);  // no lane open yet: answered in the message
  sched->run();
  lanes->open.insert(0);
  q.lane_reply = 12;
  send_pull(as(0), q);
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 2u);
  BOOST_TEST(rec.params[0].lane.empty());
  BOOST_TEST(values(rec.params[0]) == initial);
  BOOST_TEST(rec.params[1].data.empty());
  BOOST_TEST(rec.params[1].lane.ticket == 12u);
  BOOST_TEST((rec.params[1].lane.dims == std::vector<std::int64_t>{numel}));
  BOOST_REQUIRE(lanes->sent.size() == 1u);
  const auto& [rank, ticket, t] = lanes->sent[0];
  BOOST_TEST(rank == 0u);
  BOOST_TEST(ticket == 12u);
  BOOST_TEST(std::vector<float>(t.data<float>(), t.data<float>() + numel) == initial);
}

BOOST_FIXTURE_TEST_CASE(offers_go_only_to_the_rank_s_own_actor, fixture) {
  boot_with_lanes(sync_mode::async);
  std::vector<lane_offer> offers;
  std::vector<caf::error> refusals;
  auto ask = [&](const caf::actor& who, std::uint32_t rank) {
    auto s = shard;
    run_as(who, [=, &offers, &refusals](caf::event_based_actor* self) {
      self->request(s, caf::infinite, lane_open_atom::value, rank)
          .then([&](const lane_offer& o) { offers.push_back(o); }, [&](caf::error& e) { refusals.push_back(e); });
    });
    sched->run();
  };
  ask(as(1), 0);  // worker 1 asking as worker 0
  ask(as(0), 0);
  BOOST_REQUIRE(offers.size() == 1u);
  BOOST_TEST(offers[0].port == 4242);
  BOOST_REQUIRE(refusals.size() == 1u);
  BOOST_TEST(describe(refusals[0]) == "not_member: refused");
  BOOST_TEST((lanes->offered == std::vector<std::uint32_t>{0}));
}

BOOST_FIXTURE_TEST_CASE(a_member_that_floods_unnamed_payloads_loses_its_lane, fixture) {
  boot_with_lanes(sync_mode::async);
  const auto before = monitoring::refusals(monitoring::refusal::lane_refused);
  for (std::uint64_t t = 1; t <= lane::max_kept + 1; ++t) payload(1, t, filled(1.f));
  sched->run();
  BOOST_TEST((lanes->dropped == std::vector<std::uint32_t>{1}));
  BOOST_TEST(monitoring::refusals(monitoring::refusal::lane_refused) == before + 1);
  push_on_lane(1, 0, 1);  // what it sent was dropped with its lane
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::malformed));
}

BOOST_FIXTURE_TEST_CASE(a_leaver_s_waiting_calls_are_answered_and_its_lane_dropped, fixture) {
  boot_with_lanes(sync_mode::async);
  push_on_lane(0, 0, 1);
  pull(0, 1);
  sched->run();
  caf::anon_send(coord, lone_leave{0});
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 2u);
  for (auto& e : rec.errors) BOOST_TEST((troupe_code(e) == errc::not_member));
  BOOST_TEST((lanes->dropped == std::vector<std::uint32_t>{0}));
}
