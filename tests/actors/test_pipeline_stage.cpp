// Tests for actors/worker.cpp through small jobs: workers cover their data shard exactly
// once per epoch, --simulate-compute replaces the compute but keeps the protocol, a slow
// worker still finishes, and a worker whose data does not match the job refuses to train.
#define BOOST_TEST_MODULE worker
#include <boost/test/unit_test.hpp>

#include "actors/runtime.hpp"

using namespace troupe;

namespace {

job_spec job_for(sync_mode mode, std::uint32_t workers) {
  job_spec j;
  j.mode = mode;
  j.workers = workers;
  j.servers = 2;
  j.train.epochs = 2;
  j.train.batch_size = 64;
  j.stall_timeout_ms = 60000;
  return j;
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_worker_covers_its_shard_once_per_epoch) {
  auto data = std::make_shared<const dataset_split>(make_synthetic(1000, 100, 1));
  std::vector<epoch_summary> epochs;
  job_callbacks cb;
  cb.on_epoch = [&](const epoch_summary& s) { epochs.push_back(s); };
  auto r = run_job_in_process(job_for(sync_mode::async, 3), data, cb);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(r->samples == 2 * 999);  // 1000 / 3 = 333 per worker per epoch
  BOOST_REQUIRE(epochs.size() == 2u);
  BOOST_TEST(epochs[0].epoch == 0);
  BOOST_TEST(epochs[1].epoch == 1);
  BOOST_TEST(epochs[1].evaluated);
}

BOOST_AUTO_TEST_CASE(simulated_compute_keeps_the_protocol_and_skips_evaluation) {
  auto data = std::make_shared<const dataset_split>(make_synthetic(640, 10, 1));
  job_spec job = job_for(sync_mode::ssp, 4);
  job.simulate_compute_ms = 1.0;
  job.slow_worker = 2;
  job.slow_factor = 3.0;
  auto r = run_job_in_process(job, data);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(!r->evaluated);
  BOOST_TEST(r->params.empty());
  BOOST_TEST(r->samples == 2 * 640);
  BOOST_TEST(r->max_staleness <= 4 * (job.staleness + 1));
  BOOST_TEST(r->rejected == 0);
}

BOOST_AUTO_TEST_CASE(a_worker_whose_data_does_not_match_the_job_refuses) {
  auto described = std::make_shared<const dataset_split>(make_synthetic(1000, 10, 1));
  auto actual = std::make_shared<const dataset_split>(make_synthetic(900, 10, 1));
  job_spec job = job_for(sync_mode::async, 2);
  auto m = prepare_job(job, *described);
  BOOST_REQUIRE(m.has_value());
  caf::actor_system_config cfg;
  configure_in_process(cfg);
  caf::actor_system sys{cfg};
  // The coordinator believes in 1000 samples; the workers hold 900.
  auto h = spawn_job(sys, job, *m, actual, {});
  auto r = await_job(sys, h.coordinator);
  BOOST_REQUIRE(!r);
  BOOST_TEST((troupe_code(r.error()) == errc::all_workers_lost), describe(r.error()));
}
