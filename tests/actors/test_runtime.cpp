// Whole jobs in one process (actors/runtime.cpp with every actor): sync with one worker
// and one shard computes bitwise what train-local computes; sync with several workers is
// bitwise reproducible; every mode learns; a killed worker does not stop the job; a killed
// shard or a diverging run ends it with a typed error instead of a hang.
#define BOOST_TEST_MODULE runtime
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cstring>

#include "actors/runtime.hpp"
#include "actors/pipeline_stage.hpp"
#include "tensor/trainer.hpp"
#include "tests/support/caf_fixture.hpp"

using namespace troupe;

namespace {

std::shared_ptr<const dataset_split> synthetic(std::int64_t n) {
  return std::make_shared<const dataset_split>(make_synthetic(n, 500, 3));
}

std::shared_ptr<const dataset_split> fashion_subset(std::int64_t n) {
  auto d = load_fashion_mnist(std::string(default_fashion_mnist_dir));
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  d->train = head(d->train, n);
  return std::make_shared<const dataset_split>(std::move(*d));
}

job_spec small_job(sync_mode mode, std::uint32_t workers, std::uint32_t servers) {
  job_spec j;
  j.mode = mode;
  j.workers = workers;
  j.servers = servers;
  j.train.epochs = 2;
  j.train.batch_size = 50;
  j.stall_timeout_ms = 60000;
  return j;
}

job_result run_ok(job_spec job, std::shared_ptr<const dataset_split> data, job_callbacks cb = {}) {
  auto r = run_job_in_process(job, std::move(data), std::move(cb));
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  return std::move(*r);
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sync_with_one_worker_and_one_shard_is_bitwise_train_local) {
  auto data = synthetic(3000);
  job_spec job = small_job(sync_mode::sync, 1, 1);
  const job_result dist = run_ok(job, data);
  auto local = train_local(job.train, *data);
  BOOST_REQUIRE(local.has_value());
  BOOST_REQUIRE(!dist.params.empty());
  BOOST_TEST(same_bits(dist.params, local->params));
  BOOST_TEST(dist.test_accuracy == local->test_accuracy);
}

BOOST_AUTO_TEST_CASE(sync_with_several_workers_is_bitwise_reproducible) {
  auto data = synthetic(3000);
  const job_spec job = small_job(sync_mode::sync, 3, 2);
  const job_result a = run_ok(job, data), b = run_ok(job, data);
  BOOST_TEST(same_bits(a.params, b.params));
  BOOST_TEST(a.mean_staleness == 0.0);
  BOOST_TEST(a.samples == 2 * 3 * (3000 / 3));
}

BOOST_AUTO_TEST_CASE(every_mode_learns_a_fashion_mnist_subset) {
  auto data = fashion_subset(10000);
  for (sync_mode mode : {sync_mode::sync, sync_mode::async, sync_mode::ssp}) {
    job_spec job = small_job(mode, 2, 2);
    job.train.epochs = 3;
    job.train.batch_size = 128;
    const job_result r = run_ok(job, data);
    BOOST_TEST_MESSAGE(name_of(mode) << ": test accuracy " << r.test_accuracy);
    BOOST_TEST(r.test_accuracy >= 0.80, name_of(mode) << " reached " << r.test_accuracy);
    BOOST_TEST(r.evaluated);
    BOOST_TEST(r.mode == std::string(name_of(mode)));
    if (mode == sync_mode::ssp) BOOST_TEST(r.max_staleness <= 2 * (job.staleness + 1));
  }
}

BOOST_AUTO_TEST_CASE(a_killed_worker_does_not_stop_the_job) {
  auto data = synthetic(6000);
  job_spec job = small_job(sync_mode::sync, 3, 2);
  job.train.epochs = 3;
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE(m.has_value());
  caf::actor_system_config cfg;
  configure_in_process(cfg);
  caf::actor_system sys{cfg};
  std::vector<caf::actor> workers;
  std::atomic<int> epochs_seen{0};
  std::vector<std::string> events;
  job_callbacks cb;
  cb.on_epoch = [&](const epoch_summary& s) {
    if (epochs_seen++ == 0) caf::anon_send_exit(workers[1], caf::exit_reason::kill);
    if (s.epoch == 2) BOOST_TEST(s.live_workers == 2u);
  };
  cb.on_event = [&](const std::string& e) { events.push_back(e); };
  auto h = spawn_job(sys, job, *m, data, cb);
  workers = h.workers;
  auto r = await_job(sys, h.coordinator);
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  BOOST_TEST(r->workers_lost == 1);
  BOOST_TEST(epochs_seen.load() == 3);
  BOOST_REQUIRE(!events.empty());
  BOOST_TEST(events[0].find("is gone") != std::string::npos);
  BOOST_TEST(r->test_accuracy > 0.5);
}

BOOST_AUTO_TEST_CASE(a_replacement_worker_rejoins_and_the_job_finishes) {
  for (sync_mode mode : {sync_mode::sync, sync_mode::async}) {
    auto data = synthetic(6000);
    job_spec job = small_job(mode, 2, 2);
    job.train.epochs = 4;
    auto m = prepare_job(job, *data);
    BOOST_REQUIRE(m.has_value());
    caf::actor_system_config cfg;
    configure_in_process(cfg);
    caf::actor_system sys{cfg};
    job_handles h;
    std::vector<std::string> events;
    std::atomic<int> epochs_seen{0};
    job_callbacks cb;
    cb.on_epoch = [&](const epoch_summary&) {
      if (epochs_seen++ != 0) return;
      caf::anon_send_exit(h.workers[0], caf::exit_reason::kill);
      stage_options opts;
      opts.job_id = job.job_id;
      opts.data = [data](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> { return data; };
      join_as_member(spawn_pipeline_stage(sys, h.coordinator, opts), {}, 0);
    };
    cb.on_event = [&](const std::string& e) { events.push_back(e); };
    h = spawn_job(sys, job, *m, data, cb);
    auto r = await_job(sys, h.coordinator);
    BOOST_TEST_CONTEXT(name_of(mode)) {
      BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
      BOOST_TEST(r->workers_lost == 1);
      BOOST_TEST(epochs_seen.load() == 4);
      bool rejoined = false;
      for (const auto& e : events) rejoined = rejoined || e.find("rejoined") != std::string::npos;
      BOOST_TEST(rejoined);
      BOOST_TEST(r->rejected == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_killed_shard_ends_the_job_with_an_error) {
  auto data = synthetic(6000);
  job_spec job = small_job(sync_mode::async, 2, 2);
  job.train.epochs = 3;
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE(m.has_value());
  caf::actor_system_config cfg;
  configure_in_process(cfg);
  caf::actor_system sys{cfg};
  std::vector<shard_actor> shards;
  job_callbacks cb;
  cb.on_epoch = [&](const epoch_summary&) { caf::anon_send_exit(shards[0], caf::exit_reason::kill); };
  auto h = spawn_job(sys, job, *m, data, cb);
  shards = h.shards;
  auto r = await_job(sys, h.coordinator);
  BOOST_REQUIRE(!r);
  BOOST_TEST((troupe_code(r.error()) == errc::shard_lost), describe(r.error()));
  BOOST_TEST(describe(r.error()).find("died") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_diverging_run_ends_with_diverged) {
  job_spec job = small_job(sync_mode::async, 2, 1);
  job.train.lr = 1e6f;
  job.train.warmup_epochs = 0.f;
  auto r = run_job_in_process(job, synthetic(2000));
  BOOST_REQUIRE(!r);
  BOOST_TEST((troupe_code(r.error()) == errc::diverged), describe(r.error()));
  BOOST_TEST(describe(r.error()).find("--lr") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_invalid_job_is_refused_before_anything_starts) {
  job_spec job = small_job(sync_mode::async, 5000, 1);
  auto r = run_job_in_process(job, synthetic(2000));
  BOOST_REQUIRE(!r);
  BOOST_TEST((troupe_code(r.error()) == errc::bad_job));
  job_spec wrong_model = small_job(sync_mode::async, 2, 1);
  wrong_model.train.model = "mlp:100-10";
  auto r2 = run_job_in_process(wrong_model, synthetic(2000));
  BOOST_REQUIRE(!r2);
  BOOST_TEST(describe(r2.error()).find("784") != std::string::npos);
  job_spec bad_cuts = small_job(sync_mode::async, 1, 1);
  bad_cuts.pipeline_stages = 2;
  bad_cuts.cuts = {9};  // the mlp has 6 layers
  auto r3 = run_job_in_process(bad_cuts, synthetic(2000));
  BOOST_REQUIRE(!r3);
  BOOST_TEST(describe(r3.error()).find("--cuts") != std::string::npos, describe(r3.error()));
  job_spec too_deep = small_job(sync_mode::async, 1, 1);
  too_deep.pipeline_stages = 8;
  auto r4 = run_job_in_process(too_deep, synthetic(2000));
  BOOST_REQUIRE(!r4);
  BOOST_TEST(describe(r4.error()).find("too few for 8 pipeline stages") != std::string::npos, describe(r4.error()));
}
