// Tests for core/member_pulls.cpp, stepped without actors or threads
// (tests/support/member_bench.hpp): gradient buckets are pulled and pushed piece by piece
// while forward and backward run and change no bit; a piece that was not asked for, an
// answer of the wrong size or without values, and a failed pull stop the member with
// their typed errors.
#define BOOST_TEST_MODULE member_pulls
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "tests/support/member_bench.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::same_bits;
using test::member_bench;
using test::member_job;
using test::synthetic;
using test::stop_of;

// Note [Gradient buckets]: a step pulls one piece per bucket, the lowest layers' first,
// and forward waits only for the layers it has reached; the last backward pushes each
// bucket's piece and pauses before the layers below, the highest piece first; the job's
// bits are those without buckets, whatever order the pieces arrive in.
BOOST_AUTO_TEST_CASE(gradient_buckets_travel_while_forward_and_backward_run_and_change_no_bit) {
  auto data = synthetic(400);
  job_spec job = member_job(1, 1);
  job.workers = 2;
  job.bucket_bytes = 1;  // a bucket per layer with parameters
  member_bench probe(job, data);
  member_core& w = *probe.members[0];
  w.on_welcome(probe.assignment(0));
  const auto pulls = w.on_wired();
  BOOST_REQUIRE_EQUAL(pulls.size(), 3u);  // the MLP's three layers with parameters
  std::int64_t pulled = 0;
  member_actions_list actions;
  for (std::size_t i = 0; i < pulls.size(); ++i) {
    const auto& q = std::get<member_actions::pull>(pulls[i]).request;
    BOOST_TEST(q.piece_offset == pulled);  // the lowest layers' piece first
    pulled += q.piece_numel;
    actions = w.on_params(0, probe.answer(0, q));
    if (i + 1 < pulls.size()) BOOST_TEST(actions.empty());  // forward waits for the next layer's parameters
  }
  BOOST_TEST(pulled == probe.m.num_params());
  std::vector<std::int64_t> offsets;
  std::int64_t covered = 0;
  for (int pause = 0; pause < 10 && !actions.empty() && std::holds_alternative<member_actions::resume>(actions.back());
       ++pause) {
    BOOST_REQUIRE_EQUAL(actions.size(), 2u);  // one piece, then the pause
    const auto& p = std::get<member_actions::push>(actions.front()).grads;
    BOOST_TEST(p.piece_numel > 0);
    offsets.push_back(p.piece_offset);
    covered += p.piece_numel;
    actions = w.on_resume();
  }
  BOOST_REQUIRE(!actions.empty());
  const auto& last = std::get<member_actions::push>(actions.front()).grads;
  BOOST_TEST(last.piece_offset == 0);  // layer 0's piece, the last computed
  covered += last.piece_numel;
  BOOST_TEST(covered == probe.m.num_params());
  BOOST_TEST(offsets.size() == 2u);  // the MLP's three layers with parameters: two pauses
  BOOST_TEST(std::is_sorted(offsets.rbegin(), offsets.rend()));  // the highest piece first

  tensor with_buckets;
  for (auto [bytes, reversed] : {std::pair{1, false}, std::pair{0, false}, std::pair{1, true}}) {
    job.bucket_bytes = bytes;
    member_bench bench(job, data);
    bench.reverse_pieces = reversed;  // the top layers' parameters arrive first
    bench.start();
    bench.run();
    BOOST_REQUIRE(bench.stopped.empty());
    BOOST_TEST(bench.shard->counters().rejected == 0);
    BOOST_TEST(bench.shard->version() == 10);  // 2 epochs of 400 / (2 x 40)
    if (with_buckets.empty())
      with_buckets = bench.params();
    else
      BOOST_TEST(same_bits(bench.params(), with_buckets));
  }
}

BOOST_AUTO_TEST_CASE(a_piece_that_was_not_asked_for_stops_the_member) {
  job_spec job = member_job(1, 1);
  job.bucket_bytes = 1;
  member_bench bench(job, synthetic(400));
  member_core& w = *bench.members[0];
  w.on_welcome(bench.assignment(0));
  const auto pulls = w.on_wired();
  BOOST_REQUIRE(!pulls.empty());
  kv_pull q = std::get<member_actions::pull>(pulls.front()).request;
  q.piece_offset += 1;  // a piece one float off the one asked for
  const auto out = w.on_params(0, bench.answer(0, q));
  BOOST_TEST(stop_of(out).find("bad_shape: shard 0 answered with the piece [1, +") == 0u, stop_of(out));
  BOOST_TEST(stop_of(out).find("run the same troupe build") != std::string::npos);
  BOOST_TEST((w.phase() == member_phase::stopped));
}

BOOST_AUTO_TEST_CASE(an_answer_of_the_wrong_size_or_without_values_stops_the_member) {
  for (const bool without_values : {false, true}) {
    BOOST_TEST_CONTEXT((without_values ? "without values" : "one value short")) {
      member_bench bench(member_job(1, 1), synthetic(400));
      member_core& w = *bench.members[0];
      w.on_welcome(bench.assignment(0));
      const auto pulls = w.on_wired();
      BOOST_REQUIRE(!pulls.empty());
      kv_pull_reply r = bench.answer(0, std::get<member_actions::pull>(pulls.front()).request);
      const std::int64_t n = r.data.numel();
      r.data = without_values ? tensor() : tensor({n - 1});
      const auto out = w.on_params(0, r);
      const std::string want = "bad_shape: shard 0 answered with " + std::to_string(without_values ? 0 : n - 1) +
                               " f32 parameters, expected " + std::to_string(n) + " f32";
      BOOST_TEST(stop_of(out).find(want) == 0u, stop_of(out));
      BOOST_TEST(stop_of(out).find("run the same troupe build") != std::string::npos);
      BOOST_TEST((w.phase() == member_phase::stopped));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_failed_pull_stops_the_member) {
  member_bench bench(member_job(2, 2), synthetic(200));
  bench.start();
  BOOST_TEST(stop_of(bench.members[1]->on_pull_failed(0, "request_timeout")) ==
             "stalled: pull from shard 0 at clock 0 failed: request_timeout");
  BOOST_TEST(bench.members[1]->on_params(0, kv_pull_reply{}).empty());  // a stopped member takes nothing
}
