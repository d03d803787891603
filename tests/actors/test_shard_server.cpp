// Tests for actors/shard_server.cpp under CAF's deterministic scheduler: the shard joins,
// refuses work before it starts, holds sync pulls in response promises until the round
// closes, answers bad gradients with typed errors without touching its parameters,
// decodes compressed pushes (refusing malformed ones as malformed, taking an f32 one as
// it is, so a not-finite one is refused and still closes a sync round) and answers in the
// job's pull precision, takes gradients and pulls in pieces (refusing a piece outside the
// member's slice), and releases a leaver's round; pushes, pulls and administration from
// anyone but the rank's own actor and the coordinator are refused and change nothing.
#define BOOST_TEST_MODULE shard_server
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <functional>
#include <limits>

#include "monitoring/refusals.hpp"
#include "tests/support/shard_fixture.hpp"

using namespace troupe;

using test::act;
using test::filled;
using test::numel;
using test::shard_fixture;

BOOST_FIXTURE_TEST_CASE(refuses_work_before_start, shard_fixture) {
  boot(sync_mode::sync);
  push(0, 0, filled(1.f));
  pull(0, 0);
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 2u);
  // Before the start nobody holds a rank, so the shard says only that it refused.
  for (auto& e : rec.errors) BOOST_TEST((troupe_code(e) == errc::not_member));
}

BOOST_FIXTURE_TEST_CASE(sync_pull_is_held_until_the_round_closes, shard_fixture) {
  boot(sync_mode::sync);
  start();
  const params_reply initial = snapshot();
  pull(0, 0);
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 1u);  // clock 0 is served at once
  push(0, 0, filled(2.f));
  pull(0, 1);
  sched->run();
  BOOST_TEST(rec.params.size() == 1u);     // held: worker 1 has not pushed round 0
  BOOST_TEST(rec.acks.size() == 1u);
  push(1, 0, filled(4.f));
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 2u);  // released by the round's close
  const kv_pull_reply& after = rec.params[1];
  BOOST_TEST(after.versions == std::vector<std::int64_t>{1});
  for (std::int64_t i = 0; i < numel; ++i)
    BOOST_TEST(after.data.data<float>()[i] == initial.params.data<float>()[i] - 6.f);
}

// Gradient buckets (Note [Gradient pieces]): a gradient pushed in pieces closes the round
// as a whole one would, a pull of a piece is held like any pull and answered with that
// piece, and a piece outside the member's slice is refused.
BOOST_FIXTURE_TEST_CASE(gradients_and_pulls_in_pieces_and_a_piece_outside_the_slice, shard_fixture) {
  boot(sync_mode::sync);
  start();
  const params_reply initial = snapshot();
  const auto twos = [](std::int64_t n) {
    tensor t({n});
    for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = 2.f;
    return t;
  };
  push_piece(0, 0, twos(8), 7);
  pull(0, 1, 5, 5);
  sched->run();
  BOOST_TEST(rec.params.empty());  // held: round 0 is open
  BOOST_TEST(rec.acks.size() == 1u);  // the piece is taken, the gradient not yet complete
  push_piece(0, 0, twos(7), 0);
  push(1, 0, filled(4.f));
  pull(1, 1, 10, 10);  // reaches past the 15 floats
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 1u);
  const kv_pull_reply& piece = rec.params[0];
  BOOST_TEST(piece.versions == std::vector<std::int64_t>{1});
  BOOST_TEST(piece.piece_offset == 5);
  BOOST_REQUIRE(piece.data.numel() == 5);
  for (std::int64_t i = 0; i < 5; ++i)
    BOOST_TEST(piece.data.data<float>()[i] == initial.params.data<float>()[5 + i] - 6.f);
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::bad_shape));
}

BOOST_FIXTURE_TEST_CASE(bad_gradients_get_typed_errors_and_change_nothing, shard_fixture) {
  boot(sync_mode::async);
  start();
  const params_reply before = snapshot();
  tensor nan = filled(1.f);
  nan.data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  push(0, 0, nan);
  push(0, 1, tensor({numel + 3}));
  push(5, 0, filled(1.f));
  sched->run();
  push(1, 0, filled(1.f), 3);  // for another shard
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 4u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::not_finite));
  BOOST_TEST((troupe_code(rec.errors[1]) == errc::bad_shape));
  BOOST_TEST((troupe_code(rec.errors[2]) == errc::not_member));
  BOOST_TEST((troupe_code(rec.errors[3]) == errc::bad_shard));
  BOOST_TEST(rec.acks.empty());
  const params_reply after = snapshot();
  BOOST_TEST(after.version == before.version);
  BOOST_TEST(std::memcmp(after.params.bytes(), before.params.bytes(), before.params.nbytes()) == 0);
}

// Every job's push is one message (Note [Rounds per part]): a training shard takes the
// pushes that state a clock and name the pushing member's stage.
BOOST_FIXTURE_TEST_CASE(a_push_of_another_stage_s_part_or_with_no_clock_is_refused, shard_fixture) {
  boot(sync_mode::async);
  start();
  const params_reply before = snapshot();
  send_push(as(0), step_push(0, 0, 1, 0, 0, filled(1.f)));  // stage 1's part, from a stage-0 member
  kv_push loops = step_push(0, 0, 0, 1, 0, filled(1.f));
  loops.clock = kv_push::no_clock;  // as a user's loop pushes
  send_push(as(0), loops);
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 2u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::malformed));
  BOOST_TEST(describe(rec.errors[0]).find("the part of the member's stage") != std::string::npos);
  BOOST_TEST((troupe_code(rec.errors[1]) == errc::bad_job));
  // The refused push still counted as clock 0's submission, so clock 1 is the member's next.
  push(0, 1, filled(1.f));
  sched->run();
  BOOST_TEST(rec.errors.size() == 2u);
  BOOST_REQUIRE(rec.acks.size() == 1u);
  BOOST_TEST(snapshot().version == before.version + 1);
}

// Every job's pull is one message too: a training shard answers the pulls that state a
// clock and name the pulling member's stage.
BOOST_FIXTURE_TEST_CASE(a_pull_of_another_stage_s_part_or_with_no_clock_is_refused, shard_fixture) {
  boot(sync_mode::async);
  start();
  send_pull(as(0), step_pull(0, 0, 1, 0));  // stage 1's part, from a stage-0 member
  kv_pull loops = step_pull(0, 0, 0, 0);
  loops.clock = kv_pull::no_clock;  // as a user's loop pulls
  send_pull(as(0), loops);
  pull(0, 0);
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 2u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::bad_shape));
  BOOST_TEST(describe(rec.errors[0]).find("the part of the member's stage") != std::string::npos);
  BOOST_TEST((troupe_code(rec.errors[1]) == errc::bad_job));
  BOOST_REQUIRE(rec.params.size() == 1u);  // its own part's pull is answered
  BOOST_TEST(rec.params[0].data.numel() == numel);
}

BOOST_FIXTURE_TEST_CASE(compressed_pushes_are_decoded_and_malformed_ones_change_nothing, shard_fixture) {
  boot(sync_mode::async, [](job_spec& j) {
    j.compression = *parse_grad_codec("2bit:0.5");
    j.pull_precision = *parse_grad_codec("fp16");
  });
  start();
  const params_reply before = snapshot();
  tensor residual({numel});
  push(0, 0, encode(*parse_grad_codec("2bit:0.5"), filled(1.f), residual));  // every element sends +0.5
  sched->run();
  BOOST_REQUIRE(rec.acks.size() == 1u);
  tensor bad({4 + (numel + 3) / 4}, dtype::u8);
  bad.bytes()[4] = std::byte{0x03};
  push(0, 1, bad);  // code 3
  tensor nan = filled(1.f);
  nan.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
  push(0, 2, nan);  // f32: what a member sends when its gradient is not finite
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 2u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::malformed));
  BOOST_TEST((troupe_code(rec.errors[1]) == errc::not_finite), describe(rec.errors[1]));
  push(0, 3, filled(1.f));  // a finite f32 gradient is taken as it is
  sched->run();
  BOOST_REQUIRE(rec.acks.size() == 2u);
  const params_reply after = snapshot();
  BOOST_TEST(after.version == before.version + 2);  // the two good pushes only
  for (std::int64_t i = 0; i < numel; ++i)
    BOOST_TEST(after.params.data<float>()[i] == before.params.data<float>()[i] - 1.5f);
  // Pulls come back in fp16.
  pull(0, 4);
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 1u);
  BOOST_TEST((rec.params[0].data.type() == dtype::f16));
  auto decoded = decode(*parse_grad_codec("fp16"), rec.params[0].data, numel);
  BOOST_REQUIRE(decoded.has_value());
  for (std::int64_t i = 0; i < numel; ++i)
    BOOST_TEST(decoded->data<float>()[i] == f16_to_f32(f32_to_f16(after.params.data<float>()[i])));
}

BOOST_FIXTURE_TEST_CASE(a_not_finite_or_malformed_gradient_in_a_2bit_sync_job_still_closes_its_round, shard_fixture) {
  boot(sync_mode::sync, [](job_spec& j) { j.compression = *parse_grad_codec("2bit:0.5"); });
  start();
  const params_reply before = snapshot();
  tensor residual({numel});
  const auto good = [&] { return encode(*parse_grad_codec("2bit:0.5"), filled(1.f), residual); };
  tensor inf = filled(1.f);
  inf.data<float>()[0] = std::numeric_limits<float>::infinity();
  push(0, 0, inf);  // f32: what a member sends when its gradient is not finite
  push(1, 0, good());
  sched->run();
  tensor bad({4 + (numel + 3) / 4}, dtype::u8);
  bad.bytes()[4] = std::byte{0x03};
  push(0, 1, bad);  // code 3
  push(1, 1, good());
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 2u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::not_finite));
  BOOST_TEST((troupe_code(rec.errors[1]) == errc::malformed));
  BOOST_TEST(rec.acks.size() == 2u);
  const params_reply after = snapshot();
  BOOST_TEST(after.version == before.version + 2);  // both rounds closed with worker 1's gradient alone
  for (std::int64_t i = 0; i < numel; ++i)
    BOOST_TEST(after.params.data<float>()[i] == before.params.data<float>()[i] - 1.f);
}

BOOST_FIXTURE_TEST_CASE(a_shared_memory_push_to_a_shard_without_the_fast_path_changes_nothing, shard_fixture) {
  boot(sync_mode::async);  // spawned without a fast-path tag, as in one process
  start();
  const params_reply before = snapshot();
  auto s = shard;
  auto* r = &rec;
  run_as(members[0], [=](caf::event_based_actor* self) {
    kv_push p = step_push(0, 0, 0, 0, 0, tensor());
    p.shared = {"/troupe-0123456789abcdef-1-0-0badcafe", 64, 64, 1, 0, {numel}};
    self->request(s, caf::infinite, push_atom::value, std::move(p))
        .then([=](const kv_push_ack& a) { r->acks.push_back(a); }, [=](caf::error& e) { r->errors.push_back(e); });
  });
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::malformed));
  BOOST_TEST(describe(rec.errors[0]).find("fast path is off") != std::string::npos, describe(rec.errors[0]));
  const params_reply after = snapshot();
  BOOST_TEST(after.version == before.version);
  BOOST_TEST(std::memcmp(after.params.bytes(), before.params.bytes(), before.params.nbytes()) == 0);
}

BOOST_FIXTURE_TEST_CASE(a_leaver_releases_the_round_and_its_own_pull_fails, shard_fixture) {
  boot(sync_mode::sync);
  start();
  push(0, 0, filled(2.f));
  pull(0, 1);
  pull(1, 1);
  sched->run();
  BOOST_TEST(rec.params.empty());
  caf::anon_send(coord, lone_leave{1});
  sched->run();
  BOOST_REQUIRE(rec.params.size() == 1u);
  BOOST_TEST(rec.params[0].versions == std::vector<std::int64_t>{1});
  BOOST_REQUIRE(rec.errors.size() == 1u);
  BOOST_TEST((troupe_code(rec.errors[0]) == errc::not_member));
}

BOOST_FIXTURE_TEST_CASE(stats_report_counters, shard_fixture) {
  boot(sync_mode::async);
  start();
  push(0, 0, filled(1.f));
  push(1, 0, filled(1.f));
  sched->run();
  shard_stats st;
  auto c = coord;
  sys->spawn([=, &st](caf::event_based_actor* self) {
    self->request(c, caf::infinite, lone_stats{}).then([&st](shard_stats& x) { st = x; });
  });
  sched->run();
  BOOST_TEST(st.updates == 2);
  BOOST_TEST(st.version == 2);
  BOOST_TEST(st.staleness_count == 2);
  BOOST_TEST(st.staleness_sum == 1);  // the second push was computed on version 0
}

BOOST_FIXTURE_TEST_CASE(only_a_rank_s_own_actor_pushes_and_pulls_and_only_the_coordinator_administers, shard_fixture) {
  boot(sync_mode::async);
  start();
  const params_reply before = snapshot();
  const auto refused_members = monitoring::refusals(monitoring::refusal::not_a_member);
  const auto refused_admin = monitoring::refusals(monitoring::refusal::not_the_coordinator);
  // A stranger, and member 1, each claiming to be worker 0.
  auto stranger = own(sys->spawn(member_behaviour));
  push_from(stranger, 0, 0, filled(9.f));
  push_from(members[1], 0, 0, filled(9.f));
  pull_from(stranger, 0, 0);
  sched->run();
  BOOST_REQUIRE(rec.errors.size() == 3u);
  for (auto& e : rec.errors) {
    BOOST_TEST((troupe_code(e) == errc::not_member));
    BOOST_TEST(describe(e) == "not_member: refused", "a refusal says nothing of the job: " << describe(e));
  }
  BOOST_TEST(rec.params.empty());
  BOOST_TEST(monitoring::refusals(monitoring::refusal::not_a_member) == refused_members + 3);
  // The stranger asks for a snapshot and statistics, restarts the shard and removes
  // worker 0, all as if it were the coordinator.
  std::vector<caf::error> admin_errors;
  auto s = shard;
  run_as(stranger, [s, &admin_errors](caf::event_based_actor* self) {
    auto keep = [&admin_errors](caf::error& e) { admin_errors.push_back(e); };
    self->request(s, caf::infinite, snapshot_atom::value).then([](const params_reply&) {}, keep);
    self->request(s, caf::infinite, stats_atom::value).then([](const shard_stats&) {}, keep);
    self->request(s, caf::infinite, start_atom::value, shard_start{membership{{0}, {0}, 0}, {identity_of(self->ctrl())}})
        .then([](caf::ok_atom) {}, keep);
    self->request(s, caf::infinite, join_atom::value, shard_admit{{0, 0}, identity_of(self->ctrl())})
        .then([](caf::ok_atom) {}, keep);
    self->send(s, left_atom::value, std::uint32_t{0});
  });
  sched->run();
  BOOST_TEST(admin_errors.size() == 4u);
  BOOST_TEST(monitoring::refusals(monitoring::refusal::not_the_coordinator) == refused_admin + 5);
  // Nothing changed, and worker 0's own actor is still served.
  const params_reply after = snapshot();
  BOOST_TEST(after.version == before.version);
  BOOST_TEST(std::memcmp(after.params.bytes(), before.params.bytes(), before.params.nbytes()) == 0);
  rec = {};
  push(0, 0, filled(1.f));
  pull(0, 1);
  sched->run();
  BOOST_TEST(rec.errors.empty());
  BOOST_TEST(rec.acks.size() == 1u);
  BOOST_TEST(rec.params.size() == 1u);
}
