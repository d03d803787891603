// worker: the training loop as a chain of responses (pulls in, compute, pushes out).
#include "actors/worker.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "tensor/random.hpp"
#include "tensor/sampler.hpp"
#include "tensor/trainer.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;
using connect_retry_atom = caf::atom_constant<caf::atom("reconnect")>;

struct worker_state {
  coordinator_actor coordinator;
  worker_options opts;
  std::shared_ptr<const dataset_split> data;
  std::uint32_t rank = 0, world = 1;
  job_spec job;
  std::vector<shard_actor> shards;
  std::vector<std::vector<key_range>> ranges;   // per shard
  std::vector<std::int64_t> shard_numel;
  std::vector<std::int64_t> base_version;        // per shard, of the params in use
  std::unique_ptr<replica> rep;
  tensor synthetic_grad;                         // --simulate-compute
  tensor xb, yb;
  std::vector<std::int64_t> order;
  std::int64_t steps_per_epoch = 0, step_in_epoch = 0, clock = 0;
  std::int32_t epoch = 0;
  std::size_t pulls_pending = 0;
  std::int64_t acks_pending = 0, rejected = 0;
  double epoch_loss = 0.0;
  std::int64_t epoch_samples = 0;
  clock_type::time_point epoch_start;
  std::chrono::milliseconds timeout{0};
  bool finishing = false;
  std::map<std::uint32_t, std::function<void()>> retries;  // pending shard connects, by shard
  lr_schedule schedule;
  // Observability: metric handles (if metrics are on), the trace track (if tracing).
  std::optional<monitoring::worker_metrics> m;
  std::uint32_t track = 0;
  std::chrono::system_clock::time_point step_begin;
  static inline const char* name = "troupe.worker";
};

using worker_pointer = caf::stateful_actor<worker_state>*;

void start_pulls(worker_pointer self);

using wall = std::chrono::system_clock;

void trace_span(worker_pointer self, const char* name, wall::time_point begin, wall::time_point end) {
  if (self->state.opts.obs.trace) self->state.opts.obs.trace->span(self->state.track, name, begin, end);
}

double seconds_between(wall::time_point a, wall::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void fail(worker_pointer self, caf::error e) {
  spdlog::error("worker {}: {}", self->state.rank, describe(e));
  self->quit(std::move(e));
}

void maybe_finish(worker_pointer self) {
  auto& st = self->state;
  if (!st.finishing || st.acks_pending > 0) return;
  spdlog::info("worker {}: done at clock {} ({} of its gradients refused)", st.rank, st.clock, st.rejected);
  self->send(st.coordinator, done_atom::value, worker_done{st.rank, st.clock, st.rejected});
  self->quit();
}

void begin_epoch(worker_pointer self, std::int64_t first_step = 0) {
  auto& st = self->state;
  if (st.job.simulate_compute_ms <= 0.0)
    st.order = epoch_indices(st.data->train.size(), st.job.train.seed, st.epoch, static_cast<int>(st.rank),
                             static_cast<int>(st.world));
  st.step_in_epoch = first_step;
  st.epoch_loss = 0.0;
  st.epoch_samples = 0;
  st.epoch_start = clock_type::now();
}

// Forward and backward on the next batch (or the simulated stand-in). Returns the loss.
double compute(worker_pointer self, std::int64_t batch) {
  auto& st = self->state;
  const double factor = static_cast<std::int32_t>(st.rank) == st.job.slow_worker ? st.job.slow_factor : 1.0;
  if (st.job.simulate_compute_ms > 0.0) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(st.job.simulate_compute_ms * factor));
    return 0.0;
  }
  const auto t0 = clock_type::now();
  const auto idx = std::span<const std::int64_t>(st.order).subspan(st.step_in_epoch * st.job.train.batch_size, batch);
  gather_batch(st.xb.view().slice(0, batch), st.yb.view().slice(0, batch), st.data->train, idx);
  const auto c0 = wall::now();
  const double loss = st.rep->compute_gradients(st.xb.view().slice(0, batch), st.yb.view().slice(0, batch));
  const auto fwd = std::chrono::duration_cast<wall::duration>(std::chrono::duration<double>(st.rep->last_forward_seconds()));
  trace_span(self, "forward", c0, c0 + fwd);
  trace_span(self, "backward", c0 + fwd, wall::now());
  if (st.m) {
    st.m->forward_seconds->Observe(st.rep->last_forward_seconds());
    st.m->backward_seconds->Observe(st.rep->last_backward_seconds());
  }
  if (factor > 1.0) std::this_thread::sleep_for((clock_type::now() - t0) * (factor - 1.0));
  return loss;
}

void push_all(worker_pointer self) {
  auto& st = self->state;
  const auto p0 = wall::now();
  const tensor& grads = st.job.simulate_compute_ms > 0.0 ? st.synthetic_grad : st.rep->grads();
  for (std::uint32_t s = 0; s < st.shards.size(); ++s) {
    tensor g = tensor::uninitialized({st.shard_numel[s]});
    pack_shard(g, grads, st.ranges[s]);
    if (st.m) st.m->bytes_sent->Increment(static_cast<double>(g.nbytes()));
    ++st.acks_pending;
    const std::int64_t clock = st.clock;
    const auto sent = wall::now();
    self->request(st.shards[s], st.timeout, push_atom::value, push_grads{s, st.rank, clock, st.base_version[s], std::move(g)})
        .then(
            [=](const push_ack&) {
              if (self->state.m) self->state.m->push_seconds->Observe(seconds_between(sent, wall::now()));
              --self->state.acks_pending;
              maybe_finish(self);
            },
            [=](caf::error& e) {
              // A rejected gradient is counted and the loop goes on; the shard logged why.
              ++self->state.rejected;
              if (self->state.m) self->state.m->rejected->Increment();
              --self->state.acks_pending;
              spdlog::warn("worker {}: shard {} refused the gradient of clock {}: {}", self->state.rank, s, clock,
                           describe(e));
              maybe_finish(self);
            });
  }
  trace_span(self, "push", p0, wall::now());
}

void step(worker_pointer self) {
  auto& st = self->state;
  const std::int64_t per_worker = samples_per_worker(st.job);
  const std::int64_t batch = std::min(st.job.train.batch_size, per_worker - st.step_in_epoch * st.job.train.batch_size);
  const double loss = compute(self, batch);
  if (!std::isfinite(loss)) {
    fail(self, make_error(errc::diverged, "the training loss became " + std::to_string(loss) + " on worker " +
                                              std::to_string(st.rank) + " at epoch " + std::to_string(st.epoch + 1) +
                                              "; lower --lr or lengthen --warmup-epochs"));
    return;
  }
  push_all(self);
  trace_span(self, "step", st.step_begin, wall::now());
  if (st.m) {
    st.m->step_seconds->Observe(seconds_between(st.step_begin, wall::now()));
    st.m->samples->Increment(static_cast<double>(batch));
    st.m->loss->Set(loss);
    st.m->epoch->Set(st.epoch);
    st.m->learning_rate->Set(st.schedule.at(st.clock));
    st.m->clock->Set(static_cast<double>(st.clock + 1));
  }
  st.epoch_loss += loss;
  st.epoch_samples += batch;
  ++st.clock;
  ++st.step_in_epoch;
  self->send(st.coordinator, progress_atom::value, step_report{st.rank, st.clock, st.epoch, loss, batch});
  if (st.step_in_epoch == st.steps_per_epoch) {
    const double secs = std::chrono::duration<double>(clock_type::now() - st.epoch_start).count();
    self->send(st.coordinator, epoch_atom::value,
               worker_epoch{st.rank, st.epoch, st.epoch_loss, st.steps_per_epoch, st.epoch_samples, secs});
    if (++st.epoch == st.job.train.epochs) {
      st.finishing = true;
      maybe_finish(self);
      return;
    }
    begin_epoch(self);
  }
  start_pulls(self);
}

void start_pulls(worker_pointer self) {
  auto& st = self->state;
  st.step_begin = wall::now();
  st.pulls_pending = st.shards.size();
  for (std::uint32_t s = 0; s < st.shards.size(); ++s) {
    self->request(st.shards[s], st.timeout, pull_atom::value, pull_request{s, st.rank, st.clock})
        .then(
            [=](params_reply& r) {
              auto& state = self->state;
              if (r.shard != s || r.params.numel() != state.shard_numel[s] || r.params.type() != dtype::f32) {
                fail(self, make_error(errc::bad_shape, "shard " + std::to_string(s) + " answered with " +
                                                           std::to_string(r.params.numel()) + " parameters, expected " +
                                                           std::to_string(state.shard_numel[s])));
                return;
              }
              if (state.job.simulate_compute_ms <= 0.0) unpack_shard(state.rep->params(), r.params, state.ranges[s]);
              state.base_version[s] = r.version;
              if (state.m) state.m->bytes_received->Increment(static_cast<double>(r.params.nbytes()));
              if (--state.pulls_pending == 0) {
                trace_span(self, "pull", state.step_begin, wall::now());
                if (state.m) state.m->pull_seconds->Observe(seconds_between(state.step_begin, wall::now()));
                step(self);
              }
            },
            [=](caf::error& e) {
              fail(self, make_error(errc::stalled, "pull from shard " + std::to_string(s) + " at clock " +
                                                       std::to_string(self->state.clock) + " failed: " + describe(e)));
            });
  }
}

bool setup(worker_pointer self, worker_welcome& w) {
  auto& st = self->state;
  st.clock = w.resume_clock;
  st.rank = w.rank;
  st.world = w.world;
  st.job = std::move(w.job);
  st.shards = std::move(w.shards);
  st.shards.resize(w.table.shards());  // by address: filled by connect_shards
  st.timeout = std::chrono::milliseconds(st.job.request_timeout_ms);
  st.shard_numel = w.table.shard_numel;
  for (std::uint32_t s = 0; s < w.table.shards(); ++s) st.ranges.push_back(w.table.ranges_of(s));
  st.base_version.assign(st.shards.size(), 0);
  st.steps_per_epoch = steps_per_epoch(st.job);
  st.schedule = job_schedule(st.job);
  if (st.opts.obs.metrics) st.m = st.opts.obs.metrics->worker(st.rank);
  if (st.opts.obs.trace) st.track = st.opts.obs.trace->track("worker " + std::to_string(st.rank));
  auto m = build_model(st.job);
  if (!m) {
    fail(self, make_error(errc::bad_job, m.error().message));
    return false;
  }
  if (st.job.simulate_compute_ms > 0.0) {
    // A fixed, small, finite gradient: enough for the shards to do their real work.
    st.synthetic_grad = tensor({m->num_params()});
    rng r(derive_seed(st.job.train.seed, {0x51, st.rank}));
    float* g = st.synthetic_grad.data<float>();
    for (std::int64_t i = 0; i < m->num_params(); ++i) g[i] = 1e-4f * r.normal();
    return true;
  }
  auto data = st.opts.data(st.job);
  if (!data) {
    fail(self, make_error(errc::bad_job, data.error().message));
    return false;
  }
  st.data = std::move(*data);
  if (st.data->train.size() != st.job.train_size) {
    fail(self, make_error(errc::bad_job, "this worker's training set has " + std::to_string(st.data->train.size()) +
                                             " samples but the job has " + std::to_string(st.job.train_size)));
    return false;
  }
  const std::int64_t batch = st.job.train.batch_size;
  st.rep = std::make_unique<replica>(*m, batch);
  st.xb = tensor(st.data->train.sample_shape().prepend(batch));
  st.yb = tensor({batch}, dtype::i32);
  return true;
}

// Starts (or, for a worker that replaces a dead one, resumes) the loop at st.clock.
void start_training(worker_pointer self) {
  auto& st = self->state;
  spdlog::info("worker {} of {}: training {} samples per epoch against {} shards{}", st.rank, st.world,
               samples_per_worker(st.job), st.shards.size(),
               st.clock > 0 ? ", resuming at clock " + std::to_string(st.clock) : std::string());
  st.epoch = static_cast<std::int32_t>(st.clock / std::max<std::int64_t>(1, st.steps_per_epoch));
  if (st.epoch >= st.job.train.epochs) {
    st.finishing = true;
    maybe_finish(self);
    return;
  }
  begin_epoch(self, st.clock % st.steps_per_epoch);
  start_pulls(self);
}

// Connects to shard s at host:port, retrying (with a growing pause) until `deadline`:
// a shard node may still be busy with other handshakes when many workers start at once.
void connect_shard(worker_pointer self, std::uint32_t s, std::string host, std::uint16_t port,
                   clock_type::time_point deadline, std::shared_ptr<std::size_t> pending,
                   std::chrono::milliseconds pause = std::chrono::milliseconds(100)) {
  auto& st = self->state;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
  self->request(*st.opts.connector, std::max(left, std::chrono::milliseconds(1)), caf::connect_atom::value, host, port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (!ptr) {
              fail(self, make_error(errc::shard_lost, "no shard is published at " + host + ":" + std::to_string(port)));
              return;
            }
            self->state.shards[s] = caf::actor_cast<shard_actor>(std::move(ptr));
            if (--*pending == 0) start_training(self);
          },
          [=](caf::error& e) {
            if (clock_type::now() + pause < deadline) {
              spdlog::warn("worker {}: shard {} at {}:{} not reachable yet ({}); retrying", self->state.rank, s, host,
                           port, describe(e));
              self->delayed_send(self, pause, connect_retry_atom::value, s);
              self->state.retries[s] = [=] { connect_shard(self, s, host, port, deadline, pending, pause * 2); };
              return;
            }
            fail(self, make_error(errc::shard_lost, "cannot reach shard " + std::to_string(s) + " at " + host + ":" +
                                                        std::to_string(port) + ": " + describe(e)));
          });
}

// In a cluster the welcome names each shard's address: connect to every one directly
// (through the node's plain or TLS middleman), then start.
void connect_shards(worker_pointer self, worker_welcome& w) {
  auto& st = self->state;
  const bool direct = st.opts.connector && !w.shard_hosts.empty() && !w.shard_hosts.front().empty();
  if (!direct) {
    start_training(self);
    return;
  }
  auto pending = std::make_shared<std::size_t>(st.shards.size());
  const auto deadline = clock_type::now() + st.timeout;
  for (std::uint32_t s = 0; s < st.shards.size(); ++s)
    connect_shard(self, s, w.shard_hosts[s], w.shard_ports[s], deadline, pending);
}

caf::behavior worker_actor(worker_pointer self, coordinator_actor coordinator, worker_options opts) {
  self->state.coordinator = coordinator;
  self->state.opts = std::move(opts);
  self->monitor(coordinator);
  self->set_down_handler([=](caf::down_msg& dm) {
    if (dm.source != coordinator.address()) return;
    spdlog::error("worker {}: the coordinator went away ({}); stopping", self->state.rank, caf::to_string(dm.reason));
    self->quit(dm.reason);
  });
  self->request(coordinator, self->state.opts.join_timeout, join_atom::value, worker_join{self->state.opts.job_id})
      .then(
          [=](worker_welcome& w) {
            if (setup(self, w)) connect_shards(self, w);
          },
          [=](caf::error& e) { fail(self, e); });
  return {
      [](run_atom) {},  // everything else arrives as responses
      [=](connect_retry_atom, std::uint32_t s) {
        auto it = self->state.retries.find(s);
        if (it == self->state.retries.end()) return;
        auto retry = std::move(it->second);
        self->state.retries.erase(it);
        retry();
      },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& sys, coordinator_actor coordinator, worker_options opts) {
  return sys.spawn<caf::detached>(worker_actor, std::move(coordinator), std::move(opts));
}

}  // namespace troupe
