// The Prometheus side of a process: one registry, the exposer that serves it, and every
// metric family Troupe exports, built once at start-up. Roles take handles (plain
// pointers into the registry, valid as long as it lives) for their own labels. Names
// follow Prometheus conventions (troupe_ prefix, base units, _total for counters);
// labels stay low-cardinality: troupe_job, role, rank, shard, stage, and small enums.
// The job label is called troupe_job because Prometheus owns the `job` label.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/expected.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

namespace prometheus {
class Registry;
class Exposer;
}  // namespace prometheus

namespace troupe::monitoring {

// Handles a worker updates (role="worker", rank=R).
struct worker_metrics {
  prometheus::Counter* samples = nullptr;          // troupe_samples_total
  prometheus::Histogram* step_seconds = nullptr;   // troupe_step_seconds
  prometheus::Histogram* forward_seconds = nullptr;
  prometheus::Histogram* backward_seconds = nullptr;
  prometheus::Histogram* push_seconds = nullptr;   // send to acknowledgement
  prometheus::Histogram* pull_seconds = nullptr;   // request to the last shard's answer (holds included)
  prometheus::Gauge* loss = nullptr;
  prometheus::Gauge* epoch = nullptr;
  prometheus::Gauge* learning_rate = nullptr;
  prometheus::Gauge* clock = nullptr;
  prometheus::Counter* bytes_sent = nullptr;       // tensor payload to shard servers
  prometheus::Counter* bytes_received = nullptr;   // tensor payload from shard servers
  prometheus::Counter* rejected = nullptr;         // its gradients a shard refused
  // --mode allreduce: the step's ring all-reduce, start to done (troupe_phase_seconds,
  // phase="all-reduce"), and the ring pieces' values to and from its ring neighbours
  // (peer_role="worker").
  prometheus::Histogram* allreduce_seconds = nullptr;
  prometheus::Counter* ring_bytes_sent = nullptr;
  prometheus::Counter* ring_bytes_received = nullptr;
};

// Handles a shard server updates (role="server", shard=S).
struct shard_metrics {
  prometheus::Counter* updates = nullptr;          // troupe_shard_updates_total
  prometheus::Counter* late_gradients = nullptr;   // dropped: their sync round closed without them
  prometheus::Gauge* version = nullptr;
  prometheus::Histogram* staleness = nullptr;      // of applied gradients, in updates
  prometheus::Gauge* pulls_held = nullptr;         // now
  prometheus::Histogram* hold_seconds = nullptr;
  prometheus::Counter* bytes_sent = nullptr;       // to workers
  prometheus::Counter* bytes_received = nullptr;   // from workers
  prometheus::Gauge* mailbox = nullptr;            // messages waiting, sampled per message
  // troupe_rejected_messages_total{reason=...}, one counter per reason on first use
  prometheus::Counter* rejected(const std::string& reason);

  struct impl;
  std::shared_ptr<impl> self;
};

// Handles the coordinator updates (role="coordinator").
struct coordinator_metrics {
  prometheus::Gauge* epoch = nullptr;              // epochs finished by every live worker
  prometheus::Gauge* test_accuracy = nullptr;      // of the last evaluation
  prometheus::Gauge* train_loss = nullptr;         // mean over the last epoch
  prometheus::Gauge* clock_spread = nullptr;       // fastest minus slowest live worker clock
  prometheus::Counter* workers_lost = nullptr;
  prometheus::Gauge* stragglers = nullptr;         // members the ssp bound leaves out now
  // troupe_checkpoints_total{result=written|failed} and the step of the last one written.
  prometheus::Counter* checkpoints_written = nullptr;
  prometheus::Counter* checkpoints_failed = nullptr;
  prometheus::Gauge* checkpoint_step = nullptr;
  // troupe_restarts_in_place_total: the job restarted in place after losing a shard
  // server (Note [Restarting in place] in actors/coordinator_restart.cpp), or a key-value
  // job's replacement shard restored the lost one's keys (Note [Replacing a key-value
  // shard] in core/job_shard_replacement.cpp).
  prometheus::Counter* restarts_in_place = nullptr;
  // troupe_staleness_bound: the largest staleness the mode allows. Created by the first
  // call, so a job whose mode has no bound (async) does not export it.
  prometheus::Gauge* staleness_bound();
  // troupe_steps_replayed: the steps of the lost run that this resumed run repeats.
  // Created by the first call, so only a resumed job that knows (Note [Steps replayed] in
  // core/loss_record.hpp) exports it.
  prometheus::Gauge* steps_replayed();
  prometheus::Gauge* nodes_up(const std::string& node_role);
  // troupe_worker_relative_step_rate{rank=R}: the worker's step rate over the
  // median's; a straggler shows well below 1.
  prometheus::Gauge* relative_step_rate(std::uint32_t rank);
  prometheus::Gauge* worker_clock(std::uint32_t rank);
  // troupe_pipeline_bubble_fraction{kind=measured|theoretical}: over the last epoch
  // (created by the first pipeline epoch, so data-parallel jobs do not export it).
  prometheus::Gauge* pipeline_bubble(const std::string& kind);

  struct impl;
  std::shared_ptr<impl> self;
};

// Handles a pipeline stage updates (role="stage", stage=K, replica=D).
struct stage_metrics {
  prometheus::Counter* busy_seconds = nullptr;
  prometheus::Counter* bubble_seconds = nullptr;
  prometheus::Gauge* stored_activations = nullptr;
  prometheus::Gauge* peak_stored_activations = nullptr;
  prometheus::Counter* microbatches = nullptr;
};

// Handles a worker on a device updates (role="worker", rank=R, device="cuda:N"): its
// backend's caching allocator.
struct device_metrics {
  prometheus::Gauge* in_use_bytes = nullptr;       // troupe_device_memory_bytes{state="in_use"}
  prometheus::Gauge* cached_bytes = nullptr;       // {state="cached"}: free-list blocks kept for reuse
  prometheus::Counter* from_cache = nullptr;       // troupe_device_allocations_total{source="cache"}
  prometheus::Counter* from_device = nullptr;      // {source="device"}: reached cudaMalloc
  // Sets the gauges and advances the counters to the allocator's cumulative figures.
  void record(std::uint64_t in_use, std::uint64_t cached, std::uint64_t cache_hits, std::uint64_t device_mallocs);

 private:
  std::uint64_t hits_seen_ = 0, mallocs_seen_ = 0;
};

// What a process's part in its job has come to: troupe_job_state{state=...} is 1 for the
// current one and 0 for the others, so an alert can tell a node that finished its job
// from one that died (Note [Job state and linger] in metrics.cpp).
enum class job_state { running, finished, failed };

class registry {
 public:
  // job: the troupe_job label on every metric.
  explicit registry(std::string job);
  ~registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  // Serves /metrics on host:port (port 0: any free port) and returns the bound port.
  // A busy port is an error that names it, never an abort.
  expected<std::uint16_t> serve(const std::string& host, std::uint16_t port);
  std::uint16_t port() const { return port_; }

  // Starts as running.
  void set_job_state(job_state s);
  // Keeps serving until a scrape that began after this call has been answered, or for
  // `most`, whichever is first; returns at once when nothing ever scraped this process
  // (nobody is watching it) or it serves nothing.
  void linger(std::chrono::milliseconds most);
  // Scrapes the exposer has answered.
  std::uint64_t scrapes() const;

  worker_metrics worker(std::uint32_t rank);
  shard_metrics shard(std::uint32_t index);
  coordinator_metrics coordinator();
  stage_metrics stage(std::uint32_t replica, std::uint32_t stage);
  device_metrics device(std::uint32_t rank, const std::string& device);

  // The text a scrape would return (for tests).
  std::string scrape() const;
  const std::string& job() const { return job_; }

  struct families;

 private:
  friend struct coordinator_metrics;
  std::string job_;
  std::shared_ptr<prometheus::Registry> reg_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::uint16_t port_ = 0;
  std::unique_ptr<families> f_;
};

}  // namespace troupe::monitoring
