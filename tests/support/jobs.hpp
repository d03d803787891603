// Test helpers for whole jobs in one process: datasets, run_ok, and live_job,
// which runs a job while the test interferes from its epoch callback (kills a member,
// starts a replacement, sends a stranger's message) and collects the job's events.
#pragma once

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/runtime.hpp"
#include "tests/support/numeric.hpp"

namespace troupe::test {

inline std::shared_ptr<const dataset_split> synthetic(std::int64_t n, std::int64_t test_size = 500,
                                                      std::uint64_t seed = 3) {
  return std::make_shared<const dataset_split>(make_synthetic(n, test_size, seed));
}

// The first n training samples of Debian's Fashion-MNIST, and its whole test set.
inline std::shared_ptr<const dataset_split> fashion_subset(std::int64_t n) {
  auto d = load_fashion_mnist(std::string(default_fashion_mnist_dir));
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  d->train = head(d->train, n);
  return std::make_shared<const dataset_split>(std::move(*d));
}

// A small job of `workers` in `mode`: 2 shard servers (none in --mode allreduce), 2 epochs
// of 64 samples a worker, and a stall timeout of a minute.
inline job_spec job_for(sync_mode mode, std::uint32_t workers) {
  job_spec j;
  j.mode = mode;
  j.workers = workers;
  j.servers = mode == sync_mode::allreduce ? 0 : 2;
  j.train.epochs = 2;
  j.train.batch_size = 64;
  j.stall_timeout_ms = 60000;
  return j;
}

inline job_result run_ok(const job_spec& job, std::shared_ptr<const dataset_split> data, job_callbacks cb = {},
                         observability obs = {}) {
  auto r = run_job_in_process(job, std::move(data), std::move(cb), std::move(obs));
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(r), (r ? "" : describe(r.error())));
  return std::move(*r);
}

// One job in its own actor system. on_epoch runs on the coordinator's thread after each
// epoch's summary, with the job's handles (valid from the first epoch on).
struct live_job {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  job_spec job;  // as prepared
  job_handles handles;
  std::vector<std::string> events;
  std::atomic<int> epochs{0};

  live_job() {
    configure_in_process(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  // Prepares `job` for `data`, spawns it (its members read `member_data`, the same data
  // unless given) and waits for the outcome.
  caf::expected<job_result> run(job_spec spec, std::shared_ptr<const dataset_split> data,
                                std::function<void(live_job&, const epoch_summary&)> on_epoch = {},
                                std::shared_ptr<const dataset_split> member_data = nullptr) {
    job = std::move(spec);
    auto m = prepare_job(job, *data);
    BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
    job_callbacks cb;
    cb.on_epoch = [this, on_epoch](const epoch_summary& s) {
      ++epochs;
      if (on_epoch) on_epoch(*this, s);
    };
    cb.on_event = [this](const std::string& e) { events.push_back(e); };
    handles = spawn_job(*sys, job, *m, member_data ? member_data : data, cb);
    return await_job(*sys, handles.coordinator);
  }

  // Whether any event contains `text`; how many do.
  int events_with(const std::string& text) const {
    int n = 0;
    for (const auto& e : events) n += e.find(text) != std::string::npos;
    return n;
  }
};

}  // namespace troupe::test
