// metrics: the families, the handles each role gets, the exposer (with the collectors of
// collectors.hpp), troupe_build_info, and the job state with the linger for a last scrape.
#include "monitoring/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <algorithm>
#include <mutex>
#include <sstream>
#include <thread>

#include "monitoring/collectors.hpp"
#include "troupe_version.hpp"

namespace troupe::monitoring {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

namespace {

const Histogram::BucketBoundaries seconds_buckets{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                                  0.1,    0.2,   0.5,   1,     2,    5,    10};
const Histogram::BucketBoundaries staleness_buckets{0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128};

}  // namespace

struct registry::families {
  Family<Counter>* samples;
  Family<Histogram>* step_seconds;
  Family<Histogram>* phase_seconds;
  Family<Gauge>* loss;
  Family<Gauge>* epoch;
  Family<Gauge>* learning_rate;
  Family<Gauge>* worker_clock;
  Family<Counter>* bytes_sent;
  Family<Counter>* bytes_received;
  Family<Counter>* refused;
  Family<Counter>* shard_updates;
  Family<Counter>* late_gradients;
  Family<Gauge>* shard_version;
  Family<Histogram>* staleness;
  Family<Gauge>* pulls_held;
  Family<Histogram>* hold_seconds;
  Family<Counter>* rejected;
  Family<Gauge>* mailbox;
  Family<Gauge>* test_accuracy;
  Family<Gauge>* train_loss;
  Family<Gauge>* clock_spread;
  Family<Gauge>* staleness_bound;
  Family<Counter>* workers_lost;
  Family<Gauge>* stragglers;
  Family<Counter>* checkpoints;
  Family<Gauge>* checkpoint_step;
  Family<Gauge>* steps_replayed;
  Family<Counter>* restarts_in_place;
  Family<Gauge>* nodes_up;
  Family<Gauge>* relative_rate;
  Family<Counter>* stage_busy;
  Family<Counter>* stage_bubble;
  Family<Gauge>* stage_stored;
  Family<Gauge>* stage_peak;
  Family<Counter>* stage_microbatches;
  Family<Gauge>* bubble_fraction;
  Family<Gauge>* device_memory;
  Family<Counter>* device_allocations;
  Family<Gauge>* state_family;
  std::map<job_state, Gauge*> states;
  std::shared_ptr<process_collector> process;
  std::shared_ptr<scrape_counter> scrapes;
};

registry::registry(std::string job) : job_(std::move(job)), reg_(std::make_shared<prometheus::Registry>()) {
  auto& r = *reg_;
  const std::map<std::string, std::string> base{{"troupe_job", job_}};
  auto counter = [&](const char* n, const char* h) { return &BuildCounter().Name(n).Help(h).Labels(base).Register(r); };
  auto gauge = [&](const char* n, const char* h) { return &BuildGauge().Name(n).Help(h).Labels(base).Register(r); };
  auto histogram = [&](const char* n, const char* h) {
    return &BuildHistogram().Name(n).Help(h).Labels(base).Register(r);
  };
  f_ = std::make_unique<families>();
  f_->samples = counter("troupe_samples_total", "Training samples a worker has processed");
  f_->step_seconds = histogram("troupe_step_seconds", "Time of one training step: pull, forward, backward, push");
  f_->phase_seconds = histogram("troupe_phase_seconds", "Time of each phase of a step (forward, backward, push, pull, all-reduce)");
  f_->loss = gauge("troupe_loss", "Training loss of the worker's last batch");
  f_->epoch = gauge("troupe_epoch", "Current epoch (worker: its own; coordinator: finished by every live worker)");
  f_->learning_rate = gauge("troupe_learning_rate", "Learning rate of the worker's last step");
  f_->worker_clock = gauge("troupe_worker_clock", "Iterations the worker has finished");
  f_->bytes_sent = counter("troupe_bytes_sent_total", "Tensor payload bytes sent, by peer role");
  f_->bytes_received = counter("troupe_bytes_received_total", "Tensor payload bytes received, by peer role");
  f_->refused = counter("troupe_gradients_refused_total", "Gradients of this worker a shard refused");
  f_->shard_updates = counter("troupe_shard_updates_total", "Optimizer updates a shard has applied");
  f_->late_gradients = counter("troupe_late_gradients_total",
                               "Sync gradients a shard dropped because their round closed without them (--backup-workers)");
  f_->shard_version = gauge("troupe_shard_version", "Parameter version of a shard");
  f_->staleness = histogram("troupe_staleness", "Staleness of applied gradients: updates between pull and push");
  f_->pulls_held = gauge("troupe_pulls_held", "Pulls a shard holds now (sync rounds, ssp bound)");
  f_->hold_seconds = histogram("troupe_pull_hold_seconds", "How long a held pull waited");
  f_->rejected = counter("troupe_rejected_messages_total", "Messages a node refused, by reason");
  f_->mailbox = gauge("troupe_mailbox_depth", "Messages waiting in an actor's mailbox");
  f_->test_accuracy = gauge("troupe_test_accuracy", "Test accuracy of the last evaluation (fraction)");
  f_->train_loss = gauge("troupe_train_loss", "Mean training loss over the last finished epoch");
  f_->clock_spread = gauge("troupe_worker_clock_spread", "Fastest minus slowest live worker clock");
  f_->staleness_bound = gauge("troupe_staleness_bound", "Largest staleness (in updates) the consistency mode allows");
  f_->workers_lost = counter("troupe_workers_lost_total", "Workers that died during the job");
  f_->stragglers = gauge("troupe_stragglers", "Members named stragglers now, which the ssp bound leaves out");
  f_->checkpoints = counter("troupe_checkpoints_total", "Checkpoints completed or failed (--checkpoint-dir), by result");
  f_->checkpoint_step = gauge("troupe_checkpoint_step", "Step of the newest complete checkpoint");
  f_->steps_replayed = gauge("troupe_steps_replayed", "Steps of the lost run that this resumed run repeats");
  f_->restarts_in_place =
      counter("troupe_restarts_in_place_total", "Restarts of the job in place from a checkpoint after a lost shard server");
  f_->nodes_up = gauge("troupe_nodes_up", "Nodes of each role that are members now");
  f_->relative_rate = gauge("troupe_worker_relative_step_rate", "A worker's step rate over the median worker's");
  f_->stage_busy = counter("troupe_stage_busy_seconds_total", "Time a pipeline stage spent computing");
  f_->stage_bubble = counter("troupe_stage_bubble_seconds_total", "Time a pipeline stage waited inside a minibatch");
  f_->stage_stored = gauge("troupe_stage_stored_activations", "Microbatch activations a stage holds now");
  f_->stage_peak = gauge("troupe_stage_peak_stored_activations", "Most microbatch activations a stage has held");
  f_->stage_microbatches = counter("troupe_stage_microbatches_total", "Microbatches a stage has finished (forward and backward)");
  f_->bubble_fraction = gauge("troupe_pipeline_bubble_fraction", "Pipeline bubble fraction, measured and theoretical");
  f_->device_memory = gauge("troupe_device_memory_bytes", "Device memory of a worker's caching allocator, by state");
  f_->device_allocations =
      counter("troupe_device_allocations_total", "Device buffer requests, by whether the cache or the device served them");
  f_->state_family = gauge("troupe_job_state", "1 for what this process's part in the job has come to: running, "
                                             "finished or failed; 0 for the others");
  for (auto [s, name] : {std::pair{job_state::running, "running"}, std::pair{job_state::finished, "finished"},
                         std::pair{job_state::failed, "failed"}})
    f_->states[s] = &f_->state_family->Add({{"state", name}});
  set_job_state(job_state::running);
  gauge("troupe_build_info", "Always 1; the labels say which Troupe this process runs")
      ->Add({{"version", TROUPE_VERSION}, {"commit", TROUPE_COMMIT}})
      .Set(1);
  f_->process = std::make_shared<process_collector>(job_);
  f_->scrapes = std::make_shared<scrape_counter>();
}

void registry::set_job_state(job_state s) {
  for (auto& [state, gauge] : f_->states) gauge->Set(state == s ? 1 : 0);
}

// Note [Job state and linger]
// A node that ends takes its metrics with it, and Prometheus then sees `up == 0`: for a
// node that finished its job as for one that crashed. So every process exports
// troupe_job_state, and at its end sets finished or failed and lingers: it keeps serving
// until one scrape has read the final state (and the final counters), for at most
// --metrics-linger. TroupeNodeDown fires only for a node whose last scraped state was
// running. A process nobody has scraped does not linger: no one would read it. The exposer
// gives no signal when a response has been written, so linger waits a moment after the
// scrape began to let it finish.
void registry::linger(std::chrono::milliseconds most) {
  if (!exposer_ || most.count() <= 0) return;
  const std::uint64_t seen = f_->scrapes->count();
  if (seen == 0) return;
  if (f_->scrapes->wait_past(seen, std::chrono::steady_clock::now() + most))
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

std::uint64_t registry::scrapes() const { return f_->scrapes->count(); }

registry::~registry() = default;

expected<std::uint16_t> registry::serve(const std::string& host, std::uint16_t port) {
  const std::string addr = host + ":" + std::to_string(port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(addr, 2);
  } catch (const std::exception& e) {
    return failure{"cannot serve metrics on " + addr + " (" + e.what() + "); is the port in use? Choose another with "
                   "--metrics HOST:PORT, or --metrics off"};
  }
  exposer_->RegisterCollectable(f_->scrapes);
  exposer_->RegisterCollectable(reg_);
  exposer_->RegisterCollectable(f_->process);
  const auto ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? port : static_cast<std::uint16_t>(ports.front());
  return port_;
}

worker_metrics registry::worker(std::uint32_t rank) {
  const std::map<std::string, std::string> l{{"role", "worker"}, {"rank", std::to_string(rank)}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(l.begin(), l.end());
    return extra;
  };
  worker_metrics m;
  m.samples = &f_->samples->Add(l);
  m.step_seconds = &f_->step_seconds->Add(l, seconds_buckets);
  m.forward_seconds = &f_->phase_seconds->Add(with({{"phase", "forward"}}), seconds_buckets);
  m.backward_seconds = &f_->phase_seconds->Add(with({{"phase", "backward"}}), seconds_buckets);
  m.push_seconds = &f_->phase_seconds->Add(with({{"phase", "push"}}), seconds_buckets);
  m.pull_seconds = &f_->phase_seconds->Add(with({{"phase", "pull"}}), seconds_buckets);
  m.loss = &f_->loss->Add(l);
  m.epoch = &f_->epoch->Add(l);
  m.learning_rate = &f_->learning_rate->Add(l);
  m.clock = &f_->worker_clock->Add(l);
  m.bytes_sent = &f_->bytes_sent->Add(with({{"peer_role", "server"}}));
  m.bytes_received = &f_->bytes_received->Add(with({{"peer_role", "server"}}));
  m.rejected = &f_->refused->Add(l);
  m.allreduce_seconds = &f_->phase_seconds->Add(with({{"phase", "all-reduce"}}), seconds_buckets);
  m.ring_bytes_sent = &f_->bytes_sent->Add(with({{"peer_role", "worker"}}));
  m.ring_bytes_received = &f_->bytes_received->Add(with({{"peer_role", "worker"}}));
  return m;
}

struct shard_metrics::impl {
  Family<Counter>* family;
  std::map<std::string, std::string> labels;
  std::mutex mu;
  std::map<std::string, Counter*> by_reason;
};

Counter* shard_metrics::rejected(const std::string& reason) {
  std::lock_guard<std::mutex> g(self->mu);
  auto it = self->by_reason.find(reason);
  if (it != self->by_reason.end()) return it->second;
  auto l = self->labels;
  l["reason"] = reason;
  Counter* c = &self->family->Add(l);
  self->by_reason.emplace(reason, c);
  return c;
}

shard_metrics registry::shard(std::uint32_t index) {
  const std::map<std::string, std::string> l{{"role", "server"}, {"shard", std::to_string(index)}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(l.begin(), l.end());
    return extra;
  };
  shard_metrics m;
  m.updates = &f_->shard_updates->Add(l);
  m.late_gradients = &f_->late_gradients->Add(l);
  m.version = &f_->shard_version->Add(l);
  m.staleness = &f_->staleness->Add(l, staleness_buckets);
  m.pulls_held = &f_->pulls_held->Add(l);
  m.hold_seconds = &f_->hold_seconds->Add(l, seconds_buckets);
  m.bytes_sent = &f_->bytes_sent->Add(with({{"peer_role", "worker"}}));
  m.bytes_received = &f_->bytes_received->Add(with({{"peer_role", "worker"}}));
  m.mailbox = &f_->mailbox->Add(with({{"actor", "shard"}}));
  m.self = std::make_shared<shard_metrics::impl>();
  m.self->family = f_->rejected;
  m.self->labels = l;
  return m;
}

struct coordinator_metrics::impl {
  registry::families* f;
  std::mutex mu;
  std::map<std::string, Gauge*> nodes, bubbles;
  std::map<std::uint32_t, Gauge*> rates, clocks;
  Gauge* bound = nullptr;
  Gauge* replayed = nullptr;
};

Gauge* coordinator_metrics::pipeline_bubble(const std::string& kind) {
  std::lock_guard<std::mutex> g(self->mu);
  auto& slot = self->bubbles[kind];
  if (!slot) slot = &self->f->bubble_fraction->Add({{"role", "coordinator"}, {"kind", kind}});
  return slot;
}

Gauge* coordinator_metrics::nodes_up(const std::string& node_role) {
  std::lock_guard<std::mutex> g(self->mu);
  auto& slot = self->nodes[node_role];
  if (!slot) slot = &self->f->nodes_up->Add({{"role", "coordinator"}, {"node_role", node_role}});
  return slot;
}

Gauge* coordinator_metrics::staleness_bound() {
  std::lock_guard<std::mutex> g(self->mu);
  if (!self->bound) self->bound = &self->f->staleness_bound->Add({{"role", "coordinator"}});
  return self->bound;
}

Gauge* coordinator_metrics::steps_replayed() {
  std::lock_guard<std::mutex> g(self->mu);
  if (!self->replayed) self->replayed = &self->f->steps_replayed->Add({{"role", "coordinator"}});
  return self->replayed;
}

Gauge* coordinator_metrics::relative_step_rate(std::uint32_t rank) {
  std::lock_guard<std::mutex> g(self->mu);
  auto& slot = self->rates[rank];
  if (!slot) slot = &self->f->relative_rate->Add({{"role", "coordinator"}, {"rank", std::to_string(rank)}});
  return slot;
}

Gauge* coordinator_metrics::worker_clock(std::uint32_t rank) {
  std::lock_guard<std::mutex> g(self->mu);
  auto& slot = self->clocks[rank];
  if (!slot) slot = &self->f->worker_clock->Add({{"role", "coordinator"}, {"rank", std::to_string(rank)}});
  return slot;
}

coordinator_metrics registry::coordinator() {
  const std::map<std::string, std::string> l{{"role", "coordinator"}};
  coordinator_metrics m;
  m.epoch = &f_->epoch->Add(l);
  m.test_accuracy = &f_->test_accuracy->Add(l);
  m.train_loss = &f_->train_loss->Add(l);
  m.clock_spread = &f_->clock_spread->Add(l);
  m.workers_lost = &f_->workers_lost->Add(l);
  m.stragglers = &f_->stragglers->Add(l);
  m.checkpoints_written = &f_->checkpoints->Add({{"role", "coordinator"}, {"result", "written"}});
  m.checkpoints_failed = &f_->checkpoints->Add({{"role", "coordinator"}, {"result", "failed"}});
  m.checkpoint_step = &f_->checkpoint_step->Add(l);
  m.restarts_in_place = &f_->restarts_in_place->Add(l);
  m.self = std::make_shared<coordinator_metrics::impl>();
  m.self->f = f_.get();
  return m;
}

stage_metrics registry::stage(std::uint32_t replica, std::uint32_t stage) {
  const std::map<std::string, std::string> l{
      {"role", "stage"}, {"replica", std::to_string(replica)}, {"stage", std::to_string(stage)}};
  stage_metrics m;
  m.busy_seconds = &f_->stage_busy->Add(l);
  m.bubble_seconds = &f_->stage_bubble->Add(l);
  m.stored_activations = &f_->stage_stored->Add(l);
  m.peak_stored_activations = &f_->stage_peak->Add(l);
  m.microbatches = &f_->stage_microbatches->Add(l);
  return m;
}

device_metrics registry::device(std::uint32_t rank, const std::string& device) {
  const std::map<std::string, std::string> l{{"role", "worker"}, {"rank", std::to_string(rank)}, {"device", device}};
  auto with = [&](const char* key, const char* value) {
    auto m = l;
    m.emplace(key, value);
    return m;
  };
  device_metrics m;
  m.in_use_bytes = &f_->device_memory->Add(with("state", "in_use"));
  m.cached_bytes = &f_->device_memory->Add(with("state", "cached"));
  m.from_cache = &f_->device_allocations->Add(with("source", "cache"));
  m.from_device = &f_->device_allocations->Add(with("source", "device"));
  return m;
}

void device_metrics::record(std::uint64_t in_use, std::uint64_t cached, std::uint64_t cache_hits,
                            std::uint64_t device_mallocs) {
  in_use_bytes->Set(static_cast<double>(in_use));
  cached_bytes->Set(static_cast<double>(cached));
  if (cache_hits > hits_seen_) from_cache->Increment(static_cast<double>(cache_hits - hits_seen_));
  if (device_mallocs > mallocs_seen_) from_device->Increment(static_cast<double>(device_mallocs - mallocs_seen_));
  hits_seen_ = std::max(hits_seen_, cache_hits);
  mallocs_seen_ = std::max(mallocs_seen_, device_mallocs);
}

std::string registry::scrape() const {
  auto families = reg_->Collect();
  auto process = f_->process->Collect();
  families.insert(families.end(), process.begin(), process.end());
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace troupe::monitoring
