// Tests for actors/pipeline_stage.cpp through small jobs. As a data-parallel worker:
// workers cover their data shard exactly once per epoch, --simulate-compute replaces the
// compute but keeps the protocol, a slow worker still finishes, and a worker whose data
// does not match the job refuses to train. As pipeline stages: one microbatch through
// any number of stages is bitwise train-local (through shards or with --servers 0); an
// MLP in 2 stages, a CNN in 3 and two replicas of 2 stages learn a Fashion-MNIST subset;
// a lost stage stops its pipeline with a typed error, not the stall watchdog; a
// stranger's activation is dropped, and a stranger's grant or shed of rows refused.
// In allreduce mode three replicas learn and a stranger's ring piece, mailbox or lane ask is
// dropped; a previous replica whose ring lane pieces are broken stops the ring with a typed error.
#define BOOST_TEST_MODULE pipeline_stage
#include <boost/test/unit_test.hpp>


#include "actors/pipeline_stage.hpp"
#include "monitoring/refusals.hpp"
#include "tests/support/jobs.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

job_spec pipeline_job(std::uint32_t replicas, std::uint32_t stages, std::int32_t microbatches) {
  job_spec j = job_for(sync_mode::sync, replicas);
  j.pipeline_stages = stages;
  j.microbatches = microbatches;
  j.train.batch_size = 128;
  j.train.epochs = 3;
  return j;
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_worker_covers_its_shard_once_per_epoch) {
  auto data = synthetic(1000, 100, 1);
  std::vector<epoch_summary> epochs;
  job_callbacks cb;
  cb.on_epoch = [&](const epoch_summary& s) { epochs.push_back(s); };
  const job_result r = run_ok(job_for(sync_mode::async, 3), data, cb);
  BOOST_TEST(r.samples == 2 * 999);  // 1000 / 3 = 333 per worker per epoch
  BOOST_REQUIRE(epochs.size() == 2u);
  BOOST_TEST(epochs[0].epoch == 0);
  BOOST_TEST(epochs[1].epoch == 1);
  BOOST_TEST(epochs[1].evaluated);
}

BOOST_AUTO_TEST_CASE(simulated_compute_keeps_the_protocol_and_skips_evaluation) {
  auto data = synthetic(640, 10, 1);
  job_spec job = job_for(sync_mode::ssp, 4);
  job.simulate_compute_ms = 1.0;
  job.slow_worker = 2;
  job.slow_factor = 3.0;
  const job_result r = run_ok(job, data);
  BOOST_TEST(!r.evaluated);
  BOOST_TEST(r.params.empty());
  BOOST_TEST(r.samples == 2 * 640);
  BOOST_TEST(r.max_staleness <= 4 * (job.staleness + 1));
  BOOST_TEST(r.rejected == 0);
}

BOOST_AUTO_TEST_CASE(a_worker_whose_data_does_not_match_the_job_refuses) {
  auto described = synthetic(1000, 10, 1);
  auto actual = synthetic(900, 10, 1);
  // The coordinator believes in 1000 samples; the workers hold 900.
  live_job live;
  auto r = live.run(job_for(sync_mode::async, 2), described, {}, actual);
  BOOST_REQUIRE(!r);
  BOOST_TEST((troupe_code(r.error()) == errc::all_workers_lost), describe(r.error()));
}

// A stage that cannot open its device (here: no driver) stops the job with the backend's
// reason instead of computing elsewhere; on a GPU machine the same job trains there.
BOOST_AUTO_TEST_CASE(a_stage_without_its_device_stops_the_job_with_the_reason) {
  auto data = synthetic(1000, 100, 1);
  job_spec job = job_for(sync_mode::sync, 2);
  job.pipeline_stages = 2;
  job.microbatches = 2;
  job.train.epochs = 1;
  auto r = run_job_in_process(job, data, {}, {}, compute_options{device{device_kind::cuda, 0}});
  if (r) {
    BOOST_TEST_MESSAGE("a CUDA device is usable here; the job trained on it");
    BOOST_TEST(r->samples == 1000);
    return;
  }
  const std::string why = describe(r.error());
  BOOST_TEST((troupe_code(r.error()) == errc::all_workers_lost), why);
  BOOST_TEST(why.find("Use --device cpu") != std::string::npos, why);
  BOOST_TEST(why.find("stage") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(one_microbatch_through_any_stages_is_bitwise_train_local) {
  auto data = synthetic(2000, 200, 3);
  job_spec job = job_for(sync_mode::sync, 1);
  job.train.batch_size = 50;
  auto local = train_local(job.train, *data);
  BOOST_REQUIRE(local.has_value());
  for (std::uint32_t servers : {1u, 2u, 0u})
    for (std::uint32_t stages : {2u, 3u})
      BOOST_TEST_CONTEXT(stages << " stages, " << servers << " shard servers") {
        job_spec p = job;
        p.servers = servers;
        p.pipeline_stages = stages;
        const job_result r = run_ok(p, data);
        BOOST_TEST(r.pipeline_stages == stages);
        BOOST_TEST(same_bits(r.params, local->params));
        BOOST_TEST(r.test_accuracy == local->test_accuracy);
      }
}

BOOST_AUTO_TEST_CASE(an_mlp_in_two_stages_of_four_microbatches_learns) {
  for (auto schedule : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b}) {
    job_spec job = pipeline_job(1, 2, 4);
    job.schedule = schedule;
    const job_result r = run_ok(job, fashion_subset(10000));
    BOOST_TEST_MESSAGE("mlp K=2 M=4 " << name_of(schedule) << ": " << r.test_accuracy << ", bubble " << r.bubble);
    BOOST_TEST(r.test_accuracy >= 0.80, name_of(schedule) << " reached " << r.test_accuracy);
    BOOST_TEST(r.bubble > 0.0);
    BOOST_TEST(r.bubble < 1.0);
    BOOST_TEST(r.samples == 3 * 10000);
    const std::vector<std::int32_t> peak = schedule == pipeline_schedule::gpipe ? std::vector<std::int32_t>{4, 4}
                                                                               : std::vector<std::int32_t>{2, 1};
    BOOST_TEST(r.peak_stored == peak, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(a_cnn_in_three_stages_of_four_microbatches_learns) {
  job_spec job = pipeline_job(1, 3, 4);
  job.train.model = "cnn";
  job.train.epochs = 2;
  job.mode = sync_mode::async;
  const job_result r = run_ok(job, fashion_subset(6000));
  BOOST_TEST_MESSAGE("cnn K=3 M=4: " << r.test_accuracy);
  BOOST_TEST(r.test_accuracy >= 0.80, "reached " << r.test_accuracy);
  BOOST_TEST(r.mean_staleness <= 1.0);  // one pipeline: only its own previous push is missing
}

BOOST_AUTO_TEST_CASE(two_replicas_of_two_stages_learn) {
  job_spec job = pipeline_job(2, 2, 4);
  const job_result r = run_ok(job, fashion_subset(10000));
  BOOST_TEST_MESSAGE("hybrid D=2 K=2 M=4: " << r.test_accuracy);
  BOOST_TEST(r.test_accuracy >= 0.80, "reached " << r.test_accuracy);
  BOOST_TEST(r.workers == 2u);
  BOOST_TEST(r.samples == 3 * 10000);
}

BOOST_AUTO_TEST_CASE(a_lost_stage_stops_its_pipeline_with_a_typed_error) {
  auto data = synthetic(4000, 100, 1);
  for (std::uint32_t replicas : {1u, 2u}) {
    job_spec job = pipeline_job(replicas, 2, 4);
    job.train.epochs = 3;
    job.stall_timeout_ms = 120000;  // far beyond the test: the error must not come from the watchdog
    live_job live;
    auto r = live.run(job, data, [](live_job& j, const epoch_summary& s) {
      if (s.epoch == 0) caf::anon_send_exit(j.handles.workers[1], caf::exit_reason::kill);
    });
    BOOST_TEST_CONTEXT(replicas << " replicas") {
      if (replicas == 1) {
        // Its partner stops with stage_lost; with no pipeline left the job fails.
        BOOST_REQUIRE(!r);
        BOOST_TEST((troupe_code(r.error()) == errc::all_workers_lost), describe(r.error()));
        BOOST_TEST(describe(r.error()).find("of replica 0") != std::string::npos, describe(r.error()));
        BOOST_TEST(live.events_with("stage_lost") >= 1);
      } else {
        // The other replica trains on; the lost one's two stages are counted.
        BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
        BOOST_TEST(r->workers_lost == 2);
        BOOST_TEST(live.epochs.load() == 3);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_strangers_activation_is_dropped) {
  live_job live;
  auto r = live.run(pipeline_job(1, 2, 2), synthetic(3000, 100, 1), [](live_job& j, const epoch_summary& s) {
    if (s.epoch != 0) return;
    // Malformed on purpose: were it taken for the neighbour's, the stage would fail.
    for (const auto& member : j.handles.workers) {
      caf::anon_send(member, activation_atom::value, activation{0, 0, 1, 0, tensor({3, 3})});
      caf::anon_send(member, act_grad_atom::value, activation_grad{0, 1, 1, 0, tensor({3, 3})});
    }
  });
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(r->workers_lost == 0);
}

// Note [Ring all-reduce of gradients]: three replicas with no shard servers learn, and a
// ring piece, a ring mailbox's offer or answer, or an ask for a ring lane, from anyone but
// the ring neighbour it must come from is dropped.
BOOST_AUTO_TEST_CASE(allreduce_replicas_learn_and_a_strangers_ring_piece_is_dropped) {
  job_spec job = job_for(sync_mode::allreduce, 3);
  const auto refused_before = monitoring::refusals(monitoring::refusal::not_a_neighbour);
  live_job live;
  auto r = live.run(job, synthetic(3000, 100, 1), [](live_job& j, const epoch_summary& s) {
    if (s.epoch != 0) return;
    // Malformed on purpose: were it taken for the neighbour's, the member would stop.
    ring_piece p;
    p.collective = 1;
    p.values = tensor({3});
    // A piece that names a mailbox, and a mailbox offered or answered by a stranger
    // (Note [Ring mailboxes]): refused before any segment is opened.
    ring_piece shared;
    shared.collective = 1;
    shared.shared = shared_tensor{"/troupe-0123456789abcdef-1-1-deadbeef", 128, 128, 128, 0, {16}};
    const ring_mailbox_offer offer{false, shared.shared.segment, false, {}};
    const ring_mailbox_offer answer{true, shared.shared.segment, true, {}};
    // A piece that names a ring lane's payload, and an ask for a ring lane, from a
    // stranger (Note [Ring lanes]): refused before any lane is offered.
    ring_piece on_lane;
    on_lane.collective = 1;
    on_lane.lane = lane_tensor{7, 0, {16}};
    for (const auto& member : j.handles.workers) {
      caf::anon_send(member, ring_atom::value, p);
      caf::anon_send(member, ring_atom::value, shared);
      caf::anon_send(member, ring_atom::value, offer);
      caf::anon_send(member, ring_atom::value, answer);
      caf::anon_send(member, ring_atom::value, on_lane);
      caf::anon_send(member, ring_atom::value, lane_open_atom::value);
    }
  });
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(r->workers_lost == 0);
  BOOST_TEST(r->servers == 0u);
  BOOST_TEST(r->test_accuracy > 0.6);  // 3 classes
  BOOST_TEST(monitoring::refusals(monitoring::refusal::not_a_neighbour) == refused_before + 3 * 6);
}

// Note [Ring lanes], the receiver's errors: a ring of two replicas in one process, where
// the test speaks as one member to the other (in a ring of two each is the other's
// previous replica) and, as the receiver's lane threads would, hands it payloads. A piece
// naming a payload of a lane never offered, a piece with its values both in the message
// and on a lane, a payload that does not fit the piece that names it, and more payloads
// than any message names each stop the member with its typed error naming the neighbour,
// and the job ends with it instead of training on without the piece.
BOOST_AUTO_TEST_CASE(a_previous_replica_with_broken_lane_pieces_stops_the_ring_with_a_typed_error) {
  struct misbehaviour {
    const char* what;
    errc code;
    const char* says;
    std::function<void(const local_stage_actor& from, const local_stage_actor& to)> act;
  };
  const auto piece_on_lane = [](std::uint64_t ticket, std::vector<std::int64_t> dims) {
    ring_piece p;
    p.collective = 1;
    p.lane = lane_tensor{ticket, 0, std::move(dims)};
    return p;
  };
  const auto payload = [](std::uint64_t ticket, std::int64_t numel) {
    lane_payload p;
    p.peer = 0;
    p.ticket = ticket;
    p.data = tensor({numel});
    p.side = lane_side::ring_in;
    return p;
  };
  const std::vector<misbehaviour> cases = {
      {"a payload on a lane never offered", errc::stage_lost, "was never offered",
       [&](const local_stage_actor& from, const local_stage_actor& to) {
         caf::send_as(from, to, ring_atom::value, piece_on_lane(7, {16}));
       }},
      {"values in the message and on a lane", errc::malformed, "both in the message",
       [&](const local_stage_actor& from, const local_stage_actor& to) {
         ring_piece p = piece_on_lane(7, {16});
         p.values = tensor({16});
         caf::send_as(from, to, ring_atom::value, p);
       }},
      {"a payload that does not fit its piece", errc::malformed, "on the bulk lane",
       [&](const local_stage_actor& from, const local_stage_actor& to) {
         caf::anon_send(to, payload(9, 3));  // enqueued before the piece that names it
         caf::send_as(from, to, ring_atom::value, piece_on_lane(9, {16}));
       }},
      {"payloads no message names", errc::malformed, "that no message named",
       [&](const local_stage_actor&, const local_stage_actor& to) {
         for (std::uint64_t t = 1; t <= 4097; ++t) caf::anon_send(to, payload(1000 + t, 1));
       }},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      job_spec job = job_for(sync_mode::allreduce, 2);
      job.train.epochs = 3;
      job.stall_timeout_ms = 120000;  // far beyond the test: the error must not come from the watchdog
      live_job live;
      auto r = live.run(job, synthetic(3000, 100, 1), [&c](live_job& j, const epoch_summary& s) {
        if (s.epoch == 0) c.act(j.handles.workers[0], j.handles.workers[1]);
      });
      BOOST_REQUIRE(!r);
      BOOST_TEST(live.epochs.load() < 3);
      const std::string why = describe(r.error());
      // The ring cannot finish a step without the member, so the job ends naming it, with
      // the member's own error inside.
      BOOST_TEST((troupe_code(r.error()) == errc::stage_lost), why);
      // Ranks follow the joins, so the receiver is worker 0 or 1 and its neighbour the other.
      const std::string inner = "is gone (" + to_string(c.code) + ": worker ";
      const auto at = why.find(inner);
      BOOST_REQUIRE_MESSAGE(at != std::string::npos, why);
      const char receiver = why[at + inner.size()];
      BOOST_TEST((receiver == '0' || receiver == '1'), why);
      BOOST_TEST(why.find(c.says) != std::string::npos, why);
      BOOST_TEST(why.find(std::string("replica ") + (receiver == '0' ? '1' : '0')) != std::string::npos, why);
    }
  }
}

// Grants and sheds of rows from anyone but the coordinator are refused and counted: taken,
// a grant would train samples twice and a shed would leave samples untrained (Note
// [Dealing a lost worker's samples], Note [Balancing shares]).
BOOST_AUTO_TEST_CASE(a_strangers_grant_or_shed_of_rows_is_refused) {
  job_spec job = job_for(sync_mode::async, 3);
  job.train.epochs = 1;
  live_job live;
  auto data = synthetic(1500, 100, 1);
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE(m.has_value());
  const auto refused = monitoring::refusals(monitoring::refusal::not_the_coordinator);
  auto h = spawn_job(*live.sys, job, *m, data, {});
  for (const auto& member : h.workers) {
    caf::anon_send(member, rows_atom::value, rows_grant{1, 0, 1, {0, 1, 2}});
    caf::anon_send(member, rows_atom::value, rows_shed{2, 1, 0});
  }
  auto r = await_job(*live.sys, h.coordinator);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(r->samples == r->samples_planned);
  BOOST_TEST(r->samples_redealt == 0);
  BOOST_TEST(monitoring::refusals(monitoring::refusal::not_the_coordinator) == refused + 6);
}
