// Tests for core/member_ring.cpp (--mode allreduce), stepped without actors or threads
// (tests/support/member_bench.hpp carries each ring piece to the next replica): the
// replicas end bitwise equal, whatever order their pieces arrive in, and every run gives
// the same bits, and each reports the same fingerprint of them after every epoch; they
// learn what a sync job with a shard learns, and so do replicas of
// a pipeline, each stage ringing with its peers; avg is the sum over the world size;
// simulated compute rings its gradient every step; a stranger's piece is dropped with a
// warning; a piece of another step, a malformed piece and a lost
// neighbour stop the member with their typed errors, except a next replica gone in the
// job's last step, which is only warned about; the ring is in the metrics.
#define BOOST_TEST_MODULE member_ring
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "base/fingerprint.hpp"
#include "monitoring/metrics.hpp"
#include "tests/support/member_bench.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::member_bench;
using test::synthetic;
using test::same_bits;
using test::max_abs_diff;

namespace {

job_spec ring_job(std::uint32_t replicas, std::int64_t piece_elems = 1000) {
  job_spec j;
  j.job_id = "ring-under-test";
  j.mode = sync_mode::allreduce;
  j.workers = replicas;
  j.servers = 0;
  j.train.epochs = 2;
  j.train.batch_size = 20;
  j.ring_piece_elems = piece_elems;  // several pieces a chunk
  return j;
}

std::string stop_of(const member_bench& b, std::uint32_t r) {
  auto it = b.stopped.find(r);
  return it == b.stopped.end() ? "" : to_string(it->second);
}

// Runs the job to its end; every member must finish, with the same parameters.
tensor run_to_end(member_bench& bench) {
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_REQUIRE_EQUAL(bench.done.size(), bench.members.size());
  const tensor* first = bench.members[0]->local_params();
  BOOST_REQUIRE(first != nullptr);
  for (const auto& m : bench.members) BOOST_TEST(same_bits(*m->local_params(), *first));
  return *first;
}

// The parameters the same job ends with in sync mode through one shard.
tensor through_a_shard(job_spec j, std::shared_ptr<const dataset_split> data) {
  j.mode = sync_mode::sync;
  j.servers = 1;
  member_bench shard(j, std::move(data));
  shard.start();
  shard.run();
  BOOST_REQUIRE(shard.stopped.empty());
  return shard.params();
}

}  // namespace

BOOST_AUTO_TEST_CASE(replicas_end_bitwise_equal_whatever_order_their_pieces_arrive_in) {
  auto data = synthetic(360);
  for (std::uint32_t replicas : {2u, 3u, 5u})
    BOOST_TEST_CONTEXT(replicas << " replicas") {
      member_bench in_order(ring_job(replicas), data);
      const tensor a = run_to_end(in_order);
      BOOST_TEST(in_order.done.at(0).clock == 2 * ((360 / replicas + 19) / 20));  // the last batch may be short
      member_bench reversed(ring_job(replicas), data);
      reversed.reverse_ring = true;
      const tensor b = run_to_end(reversed);
      BOOST_TEST(same_bits(a, b));
      member_bench again(ring_job(replicas), data);
      BOOST_TEST(same_bits(run_to_end(again), a));
      // Only replica 0 sends its parameters with the epoch's report: all hold the same, and
      // every one says so with their fingerprint (Note [Replicas agree]).
      for (const auto& e : in_order.epochs) BOOST_TEST((e.rank == 0) == !e.params.empty());
      const std::uint64_t last = fnv1a64(a.bytes(), a.nbytes());
      std::map<std::int32_t, std::uint64_t> by_epoch;
      for (const auto& e : in_order.epochs) {
        BOOST_TEST(e.params_fnv1a != 0u);
        by_epoch.try_emplace(e.epoch, e.params_fnv1a);
        BOOST_TEST(e.params_fnv1a == by_epoch.at(e.epoch));
      }
      BOOST_TEST(by_epoch.at(1) == last);
      BOOST_TEST(by_epoch.at(0) != last);
    }
}

BOOST_AUTO_TEST_CASE(the_ring_learns_what_a_sync_round_through_a_shard_learns) {
  auto data = synthetic(360);
  member_bench ring(ring_job(3), data);
  const tensor by_ring = run_to_end(ring);
  // The same sums in another order: equal but for rounding.
  BOOST_TEST(max_abs_diff(by_ring, through_a_shard(ring_job(3), data)) < 1e-4f);
}

// Hybrid: each stage rings with the same stage of the other replicas.
BOOST_AUTO_TEST_CASE(replicas_of_a_pipeline_ring_stage_by_stage) {
  auto data = synthetic(360);
  job_spec j = ring_job(3);
  j.pipeline_stages = 2;
  j.microbatches = 2;
  member_bench ring(j, data);
  ring.start();
  ring.run();
  BOOST_REQUIRE(ring.stopped.empty());
  BOOST_REQUIRE_EQUAL(ring.done.size(), 6u);
  for (std::uint32_t stage = 0; stage < 2; ++stage)
    for (std::uint32_t replica = 1; replica < 3; ++replica)
      BOOST_TEST(same_bits(*ring.members[replica * 2 + stage]->local_params(), *ring.members[stage]->local_params()));
  const tensor want = through_a_shard(j, data);
  const auto spans = job_stage_spans(ring.job, ring.m);
  for (std::uint32_t stage = 0; stage < 2; ++stage) {
    tensor part = tensor::uninitialized({spans[stage].numel});
    copy(part.view(), want.view().flat(spans[stage].param_offset, spans[stage].numel));
    BOOST_TEST(max_abs_diff(*ring.members[stage]->local_params(), part) < 1e-4f);
  }
}

BOOST_AUTO_TEST_CASE(avg_applies_the_sum_over_the_number_of_replicas) {
  // One step of plain SGD from the same start: the avg step is the sum step over 4.
  auto data = synthetic(80);
  auto one_step = [&](reduce_op op) {
    job_spec j = ring_job(4);
    j.train.epochs = 1;
    j.train.optimizer = {optimizer_kind::sgd, 0.f, false, 0.f};  // the step is lr * gradient
    j.train.warmup_epochs = 0;
    j.ring_op = op;
    member_bench b(j, data);
    b.start();
    const tensor before = *b.members[0]->local_params();
    b.run();
    BOOST_REQUIRE(b.stopped.empty());
    tensor step = tensor::uninitialized(before.sizes());
    for (std::int64_t i = 0; i < step.numel(); ++i)
      step.data<float>()[i] = b.members[0]->local_params()->data<float>()[i] - before.data<float>()[i];
    return std::pair{step, job_schedule(b.job).at(0)};
  };
  const auto [sum_step, sum_lr] = one_step(reduce_op::sum);
  const auto [avg_step, avg_lr] = one_step(reduce_op::avg);
  float worst = 0.f, largest = 0.f;
  for (std::int64_t i = 0; i < sum_step.numel(); ++i) {
    const float want = sum_step.data<float>()[i] / 4.f * (avg_lr / sum_lr);
    worst = std::max(worst, std::fabs(avg_step.data<float>()[i] - want));
    largest = std::max(largest, std::fabs(want));
  }
  BOOST_TEST(largest > 0.f);
  BOOST_TEST(worst <= 1e-5f * largest + 1e-9f);
}

BOOST_AUTO_TEST_CASE(simulated_compute_rings_its_gradient_every_step) {
  job_spec j = ring_job(3);
  j.simulate_compute_ms = 0.01;
  j.train.epochs = 1;
  member_bench bench(j, synthetic(120));
  std::size_t pieces = 0;
  bench.on_ring = [&](std::uint32_t, ring_piece&) { return ++pieces > 0; };
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.done.size() == 3u);
  // Each step every chunk's pieces make world - 1 hops in each phase.
  const std::int64_t steps = bench.done.at(0).clock, n = bench.m.num_params();
  BOOST_TEST(steps == 2);
  std::int64_t per_step = 0;
  for (std::int64_t c = 0; c < 3; ++c) per_step += 2 * 2 * ((n / 3 + (c < n % 3 ? 1 : 0) + 999) / 1000);
  BOOST_TEST(pieces == static_cast<std::size_t>(steps * per_step));
}

BOOST_AUTO_TEST_CASE(a_strangers_piece_is_dropped_with_a_warning_and_changes_nothing) {
  auto data = synthetic(120);
  member_bench clean(ring_job(3), data);
  const tensor want = run_to_end(clean);
  member_bench bench(ring_job(3), data);
  bool injected = false;
  bench.on_ring = [&](std::uint32_t from, ring_piece& p) {
    if (!injected && from == 0) {
      injected = true;
      ring_piece forged = p;
      forged.values = tensor({p.values.numel()});  // zeros, and a copy: the real one goes on
      bench.deliver(1, bench.members[1]->on_ring_piece(std::move(forged), false, "a stranger"));
    }
    return true;
  };
  BOOST_TEST(same_bits(run_to_end(bench), want));
  BOOST_REQUIRE_EQUAL(bench.warnings.size(), 1u);
  BOOST_TEST(bench.warnings[0].find("dropped a ring piece from a stranger, which is not worker 0") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_piece_of_another_step_or_of_the_wrong_shape_stops_the_member) {
  auto data = synthetic(120);
  struct broken { const char* what; std::function<void(ring_piece&)> spoil; std::string want; };
  const std::vector<broken> cases{
      {"another step", [](ring_piece& p) { p.collective += 5; }, "bad_clock: worker 1: worker 0 sent a ring piece of step 5 at step 0"},
      {"cut short", [](ring_piece& p) { p.values = tensor({1}); }, "bad_shape: a piece from ring rank 0 holds [0, +1)"},
      {"not f32", [](ring_piece& p) { p.values = tensor({p.values.numel()}, dtype::i32); }, "bad_dtype"},
  };
  for (const auto& c : cases)
    BOOST_TEST_CONTEXT(c.what) {
      member_bench bench(ring_job(3), data);
      bool spoiled = false;
      bench.on_ring = [&](std::uint32_t from, ring_piece& p) {
        if (!spoiled && from == 0) {
          spoiled = true;
          c.spoil(p);
        }
        return true;
      };
      bench.start();
      bench.run();
      const std::string why = stop_of(bench, 1);
      BOOST_TEST(why.find(c.want) == 0, why);
      BOOST_TEST(bench.done.empty());  // the others wait on the stopped one; its shell's exit stops them
    }
}

BOOST_AUTO_TEST_CASE(more_pieces_of_the_next_step_than_a_step_has_stop_the_member) {
  member_bench bench(ring_job(2), synthetic(120));
  bench.start();  // the members wait in the mailbox for their first step
  ring_piece p;
  p.collective = 0;
  p.values = tensor({4});
  member_actions_list out;
  for (int i = 0; i < 1'000'000 && out.empty(); ++i) out = bench.members[1]->on_ring_piece(p, true, "worker 0");
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST(to_string(std::get<member_actions::stop>(out[0]).why).find("more pieces than a step has") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_lost_ring_neighbour_stops_the_member_naming_it) {
  member_bench bench(ring_job(4), synthetic(120));
  bench.start();
  auto out = bench.members[2]->on_ring_neighbour_down(true, "killed");
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  const fault why = std::get<member_actions::stop>(out[0]).why;
  BOOST_TEST((why.code == errc::stage_lost));
  BOOST_TEST(why.detail.find("worker 1 is gone (killed); worker 2 stops") == 0, why.detail);
  out = bench.members[3]->on_ring_neighbour_down(false, "killed");
  BOOST_TEST(std::get<member_actions::stop>(out[0]).why.detail.find("worker 0 is gone") == 0);
}

// The metrics: each step's ring in troupe_phase_seconds{phase="all-reduce"}, and the
// pieces' bytes to and from the ring neighbours in troupe_bytes_{sent,received}_total
// with peer_role="worker". With 2 replicas each sends its own chunk and the one it owns:
// the whole gradient, once, a step.
BOOST_AUTO_TEST_CASE(the_ring_is_counted_in_the_metrics) {
  member_setup setup;
  setup.obs.metrics = std::make_shared<monitoring::registry>("ring-metrics");
  member_bench bench(ring_job(2), synthetic(120), setup);
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  const std::int64_t steps = bench.done.at(0).clock;
  const double per_step = 4.0 * static_cast<double>(bench.m.num_params());
  std::map<std::string, double> seen;
  std::istringstream scrape(setup.obs.metrics->scrape());
  for (std::string line; std::getline(scrape, line);) {
    if (line.rfind("troupe_", 0) != 0 || line.find("rank=\"0\"") == std::string::npos) continue;
    const double v = std::stod(line.substr(line.rfind(' ') + 1));
    if (line.rfind("troupe_phase_seconds_count{", 0) == 0 && line.find("phase=\"all-reduce\"") != std::string::npos)
      seen["count"] = v;
    if (line.find("peer_role=\"worker\"") != std::string::npos) {
      if (line.rfind("troupe_bytes_sent_total{", 0) == 0) seen["sent"] = v;
      if (line.rfind("troupe_bytes_received_total{", 0) == 0) seen["received"] = v;
    }
  }
  BOOST_TEST(seen["count"] == static_cast<double>(steps));
  BOOST_TEST(seen["sent"] == per_step * static_cast<double>(steps));
  BOOST_TEST(seen["received"] == per_step * static_cast<double>(steps));
}

// Note [A next replica gone in the last step]: in the job's last step the next replica's
// loss is only warned about, and the member still finishes from its previous replica's
// pieces; the previous replica's loss still stops it, and so does the next one's in an
// earlier step.
BOOST_AUTO_TEST_CASE(a_next_replica_gone_in_the_last_step_is_only_warned_about) {
  auto one_step = ring_job(3);
  one_step.train.epochs = 1;
  member_bench bench(one_step, synthetic(60));  // 20 samples a replica: one step of 20
  bench.start();
  auto out = bench.members[1]->on_ring_neighbour_down(false, "remote_link_unreachable");
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_REQUIRE(std::holds_alternative<member_actions::warn>(out[0]));
  const std::string said = std::get<member_actions::warn>(out[0]).text;
  BOOST_TEST(said.find("worker 2 is gone (remote_link_unreachable) during the job's last step; worker 1 needs "
                       "nothing more from it and finishes") == 0,
             said);
  bench.run();
  BOOST_TEST(bench.stopped.empty());
  BOOST_TEST(bench.done.size() == 3u);

  member_bench prev_lost(one_step, synthetic(60));
  prev_lost.start();
  out = prev_lost.members[1]->on_ring_neighbour_down(true, "killed");
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST((std::get<member_actions::stop>(out[0]).why.code == errc::stage_lost));

  member_bench earlier(ring_job(3), synthetic(60));  // 2 epochs: the first step is not the last
  earlier.start();
  out = earlier.members[1]->on_ring_neighbour_down(false, "killed");
  BOOST_REQUIRE_EQUAL(out.size(), 1u);
  BOOST_TEST(std::get<member_actions::stop>(out[0]).why.detail.find("worker 2 is gone (killed)") == 0);
}
