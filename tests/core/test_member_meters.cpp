// member_meters: a member's figures reach the job's metrics and trace. A step's figures
// land in the worker's (and in a pipeline the stage's) metrics, the last stage's loss
// only when it has one; stored activations keep their peak; transfers and refusals count;
// spans go to the member's own track; and with observability off every call does nothing.
#define BOOST_TEST_MODULE member_meters
#include <boost/test/unit_test.hpp>

#include <memory>

#include "core/member_meters.hpp"
#include "monitoring/trace.hpp"

using namespace troupe;

namespace {

struct observed {
  observability obs{std::make_shared<monitoring::registry>("meters-under-test"),
                    std::make_shared<monitoring::trace_log>()};
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_steps_figures_reach_the_worker_and_stage_metrics) {
  observed o;
  member_meters m(o.obs, 3, "replica 1 stage 0", member_meters::stage_place{1, 0});
  m.step_done({0.5, 0.1, 0.3, 128, std::nullopt, 2, 0.05, 7, 0.4, 0.1});
  auto w = o.obs.metrics->worker(3);
  auto s = o.obs.metrics->stage(1, 0);
  BOOST_TEST(w.samples->Value() == 128.0);
  BOOST_TEST(w.clock->Value() == 7.0);
  BOOST_TEST(w.epoch->Value() == 2.0);
  BOOST_TEST(w.learning_rate->Value() == 0.05);
  BOOST_TEST(w.loss->Value() == 0.0);  // not the last stage: no loss of its own
  BOOST_TEST(s.busy_seconds->Value() == 0.4);
  BOOST_TEST(s.bubble_seconds->Value() == 0.1);
  m.step_done({0.5, 0.1, 0.3, 64, 1.25, 2, 0.05, 8, 0.0, 0.0});
  BOOST_TEST(w.samples->Value() == 192.0);
  BOOST_TEST(w.loss->Value() == 1.25);
}

BOOST_AUTO_TEST_CASE(stored_activations_keep_their_peak_and_transfers_count) {
  observed o;
  member_meters m(o.obs, 0, "replica 0 stage 1", member_meters::stage_place{0, 1});
  for (int d : {+1, +1, +1, -1, -1, +1, -1, -1}) m.stored(d);
  BOOST_TEST(m.peak_stored() == 3);
  auto s = o.obs.metrics->stage(0, 1);
  BOOST_TEST(s.stored_activations->Value() == 0.0);
  BOOST_TEST(s.peak_stored_activations->Value() == 3.0);
  m.microbatch_done();
  BOOST_TEST(s.microbatches->Value() == 1.0);
  m.bytes_sent(400);
  m.bytes_received(1000);
  m.ring_bytes_sent(12);
  m.push_refused();
  auto w = o.obs.metrics->worker(0);
  BOOST_TEST(w.bytes_sent->Value() == 400.0);
  BOOST_TEST(w.bytes_received->Value() == 1000.0);
  BOOST_TEST(w.ring_bytes_sent->Value() == 12.0);
  BOOST_TEST(w.rejected->Value() == 1.0);
}

BOOST_AUTO_TEST_CASE(spans_go_to_the_members_own_track) {
  observed o;
  o.obs.trace->track("someone else");
  member_meters m(o.obs, 1, "worker 1", std::nullopt);
  const auto t0 = member_meters::wall::now();
  m.span("forward", t0, t0 + std::chrono::milliseconds(2), 4, 0);
  m.span("step", t0, t0 + std::chrono::milliseconds(3));
  BOOST_TEST(o.obs.trace->recorded() == 2u);
}

BOOST_AUTO_TEST_CASE(with_observability_off_every_call_does_nothing) {
  member_meters m(observability{}, 0, "worker 0", member_meters::stage_place{0, 0});
  m.on_device(observability{}, 0, "cuda:0");
  BOOST_TEST(!m.watches_device());
  m.step_done({1, 1, 1, 1, 1.0, 1, 1, 1, 1, 1});
  m.bytes_sent(1);
  m.span("step", member_meters::wall::now(), member_meters::wall::now());
  m.stored(+1);
  BOOST_TEST(m.peak_stored() == 1);  // still counted: the member reports its peak when done
}
