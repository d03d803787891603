// coordinator: admission, start, progress and epochs, evaluation, failures, the result.
#include "actors/coordinator.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <limits>
#include <map>
#include <optional>

#include "actors/evaluator.hpp"
#include "core/bubble_meter.hpp"
#include "core/local_groups.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

struct worker_info {
  caf::actor handle;
  std::string host;                  // where pipeline neighbours reach it (cluster)
  std::uint16_t port = 0;
  std::string locality;              // worker_join::locality
  std::vector<std::uint32_t> group;  // --local-reduce: its local group (ascending), or empty
  bool live = true;
  bool done = false;
  std::int32_t epochs_reported = 0;  // epochs this worker has finished
  std::int64_t clock = 0;
  std::int64_t clock_at_tick = 0;    // for the step rate
  double step_rate = 0.0;            // steps/s, smoothed over ticks
};

struct epoch_agg {
  double loss_sum = 0.0;
  std::int64_t steps = 0, samples = 0;
};

struct stats_total {
  std::int64_t staleness_sum = 0, staleness_count = 0, staleness_max = 0, rejected = 0;
};

struct coordinator_state {
  job_spec job;
  key_table table;
  std::int64_t num_params = 0;
  std::optional<model> layout;  // the job's model (stage spans)
  std::shared_ptr<const dataset_split> data;
  evaluator_actor evaluator;
  job_callbacks cb;
  std::vector<shard_actor> shards;
  std::vector<std::string> shard_hosts;
  std::vector<std::uint16_t> shard_ports;
  std::vector<caf::typed_response_promise<worker_welcome>> pending_joins;
  // Workers that joined a running job while no rank was free: each takes the next rank
  // whose worker dies (a restarted node can come up before its old self is known dead).
  std::vector<std::pair<caf::typed_response_promise<worker_welcome>, caf::actor>> standby;
  std::vector<worker_info> workers;
  bool starting = false, started = false, training_done = false, finished = false;
  clock_type::time_point t_start, t_end, last_progress, epoch_start;
  bool first_step_seen = false;  // training time counts from the first step (after workers load data)
  std::map<std::int32_t, epoch_agg> epochs;
  std::int32_t epochs_closed = 0;  // epochs whose summary is scheduled
  int evals_pending = 0;
  stats_total stats_at_last_epoch;
  std::int64_t samples = 0, workers_lost = 0;
  std::optional<std::pair<clock_type::time_point, std::int64_t>> first_done;  // when, samples by then
  double final_accuracy = 0.0, final_loss = 0.0;
  bool final_evaluated = false;
  tensor final_params;
  std::optional<bubble_meter> bubble;  // pipelines only
  std::map<std::int32_t, tensor> epoch_params;  // --servers 0: assembled from the stages
  std::string first_loss;                       // why the first member was lost
  std::vector<std::int32_t> peak_stored;        // per stage, over the replicas that finished
  std::optional<caf::typed_response_promise<job_result>> run_promise;
  std::optional<monitoring::coordinator_metrics> m;
  clock_type::time_point last_tick;
  std::optional<job_result> result;
  caf::error failure;
  static inline const char* name = "troupe.coordinator";
};

using coord_pointer = coordinator_actor::stateful_pointer<coordinator_state>;

std::chrono::milliseconds request_timeout(coord_pointer self) {
  return std::chrono::milliseconds(self->state.job.request_timeout_ms);
}

// "worker 3", or "stage 1 of replica 0" in a pipeline job.
std::string member_name(const job_spec& job, std::uint32_t r) {
  if (job.pipeline_stages == 1) return "worker " + std::to_string(r);
  return "stage " + std::to_string(r % job.pipeline_stages) + " of replica " + std::to_string(r / job.pipeline_stages);
}

void event(coord_pointer self, const std::string& what) {
  spdlog::warn("coordinator: {}", what);
  if (self->state.cb.on_event) self->state.cb.on_event(what);
}

// Workers that have not died (finished ones count).
std::uint32_t live_workers(coord_pointer self) {
  std::uint32_t n = 0;
  for (const auto& w : self->state.workers) n += w.live;
  return n;
}

// Stops every member with `reason` (user_shutdown after a success, the job's error after
// a failure, so remote nodes can tell which), then the coordinator itself.
// Exports how many nodes of each role are members now.
void count_nodes(coord_pointer self) {
  auto& st = self->state;
  if (!st.m) return;
  st.m->nodes_up("coordinator")->Set(1);
  st.m->nodes_up("server")->Set(static_cast<double>(st.shards.size()));
  double workers = 0;
  for (const auto& w : st.workers) workers += w.live && !w.done;
  st.m->nodes_up("worker")->Set(workers);
}

// Each live worker's step rate (smoothed over ticks) relative to the median: a straggler
// shows well below 1 under its rank.
void update_step_rates(coord_pointer self) {
  auto& st = self->state;
  const auto now = clock_type::now();
  const double dt = std::chrono::duration<double>(now - st.last_tick).count();
  st.last_tick = now;
  if (!st.started || dt <= 0) return;
  std::vector<double> rates;
  for (auto& w : st.workers) {
    const double inst = static_cast<double>(w.clock - w.clock_at_tick) / dt;
    w.clock_at_tick = w.clock;
    w.step_rate = w.step_rate == 0.0 ? inst : 0.7 * w.step_rate + 0.3 * inst;
    if (w.live && !w.done) rates.push_back(w.step_rate);
  }
  if (!st.m || rates.empty()) return;
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  const double median = rates[rates.size() / 2];
  for (std::uint32_t r = 0; r < st.workers.size(); ++r)
    if (st.workers[r].live && !st.workers[r].done)
      st.m->relative_step_rate(r)->Set(median > 0 ? st.workers[r].step_rate / median : 1.0);
}

void shutdown(coord_pointer self, const caf::error& reason) {
  auto& st = self->state;
  for (auto& [promise, handle] : st.standby)
    promise.deliver(make_error(errc::cluster_full, "the job ended before a rank became free"));
  st.standby.clear();
  for (auto& w : st.workers)
    if (w.handle) self->send_exit(w.handle, reason);
  for (auto& s : st.shards) self->send_exit(s, reason);
  if (st.evaluator) self->send_exit(st.evaluator, caf::exit_reason::user_shutdown);
  self->quit(reason);
}

void fail(coord_pointer self, caf::error e) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  spdlog::error("coordinator: the job failed: {}", describe(e));
  st.failure = e;
  if (st.run_promise) st.run_promise->deliver(e);
  shutdown(self, e);
}

void succeed(coord_pointer self, job_result r) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  st.result = r;
  if (st.run_promise) st.run_promise->deliver(std::move(r));
  shutdown(self, caf::exit_reason::user_shutdown);
}

// Collects a full parameter snapshot and the shards' stats, then calls `done`.
struct gather {
  tensor params;
  std::vector<shard_stats> stats;
  std::size_t pending = 0;
};

// With --servers 0 there are no shards: the parameters are those the stages sent with
// epoch `epoch`'s reports, and there are no stats.
void collect(coord_pointer self, bool with_params, std::int32_t epoch, std::function<void(gather&)> done) {
  auto& st = self->state;
  auto g = std::make_shared<gather>();
  if (st.shards.empty()) {
    if (with_params) g->params = std::move(st.epoch_params[epoch]);
    st.epoch_params.erase(epoch);
    done(*g);
    return;
  }
  if (with_params) g->params = tensor({st.num_params});
  g->pending = st.shards.size() * (with_params ? 2 : 1);
  auto finish_one = [=] {
    if (--g->pending == 0) done(*g);
  };
  auto on_error = [=](caf::error& e) { fail(self, make_error(errc::shard_lost, "a shard did not answer: " + describe(e))); };
  for (std::uint32_t s = 0; s < st.shards.size(); ++s) {
    self->request(st.shards[s], request_timeout(self), stats_atom::value)
        .then([=](shard_stats& x) { g->stats.push_back(std::move(x)); finish_one(); }, on_error);
    if (!with_params) continue;
    self->request(st.shards[s], request_timeout(self), snapshot_atom::value)
        .then(
            [=](params_reply& r) {
              const auto ranges = self->state.table.ranges_of(s);
              if (r.params.numel() != self->state.table.shard_numel[s]) {
                fail(self, make_error(errc::bad_shape, "shard " + std::to_string(s) + " sent a snapshot of the wrong size"));
                return;
              }
              unpack_shard(g->params, r.params, ranges);
              finish_one();
            },
            on_error);
  }
}

stats_total sum_stats(const std::vector<shard_stats>& v) {
  stats_total t;
  for (const auto& s : v) {
    t.staleness_sum += s.staleness_sum;
    t.staleness_count += s.staleness_count;
    t.staleness_max = std::max(t.staleness_max, s.staleness_max);
    t.rejected += s.rejected;
  }
  return t;
}

void maybe_finalize(coord_pointer self);

// Files a stage's step window; a replica's step is measured once all its stages reported.
// Summarises epoch e: collects stats (and parameters, unless compute is simulated),
// evaluates, reports through the callback.
void close_epoch(coord_pointer self, std::int32_t e) {
  auto& st = self->state;
  const epoch_agg agg = st.epochs[e];
  const auto now = clock_type::now();
  epoch_summary sum;
  sum.epoch = e;
  sum.epochs = st.job.train.epochs;
  sum.seconds = std::chrono::duration<double>(now - st.t_start).count();
  const double wall = std::chrono::duration<double>(now - st.epoch_start).count();
  sum.samples_per_second = wall > 0 ? static_cast<double>(agg.samples) / wall : 0.0;
  sum.train_loss = agg.steps > 0 ? agg.loss_sum / static_cast<double>(agg.steps) : 0.0;
  sum.live_workers = live_workers(self);
  st.epoch_start = now;
  const bool evaluate_params = st.job.simulate_compute_ms <= 0.0;
  const bool last = e + 1 == st.job.train.epochs;
  ++st.evals_pending;
  if (st.bubble) {
    sum.pipeline_stages = st.job.pipeline_stages;
    sum.microbatches = st.job.microbatches;
    sum.bubble = st.bubble->fraction(e);
    sum.theoretical_bubble = theoretical_bubble(static_cast<int>(st.job.pipeline_stages), st.job.microbatches);
    if (st.m) {
      st.m->pipeline_bubble("measured")->Set(sum.bubble);
      st.m->pipeline_bubble("theoretical")->Set(sum.theoretical_bubble);
    }
  }
  collect(self, evaluate_params, e, [=](gather& g) {
    auto& s = self->state;
    const stats_total t = sum_stats(g.stats);
    epoch_summary out = sum;
    const std::int64_t dn = t.staleness_count - s.stats_at_last_epoch.staleness_count;
    out.mean_staleness =
        dn > 0 ? static_cast<double>(t.staleness_sum - s.stats_at_last_epoch.staleness_sum) / static_cast<double>(dn) : 0.0;
    out.max_staleness = t.staleness_max;
    s.stats_at_last_epoch = t;
    auto report = [=](epoch_summary r) {
      auto& st2 = self->state;
      if (st2.m) {
        st2.m->epoch->Set(r.epoch + 1);
        st2.m->train_loss->Set(r.train_loss);
        if (r.evaluated) st2.m->test_accuracy->Set(r.test_accuracy);
      }
      if (st2.cb.on_epoch) st2.cb.on_epoch(r);
      if (last) {
        st2.final_evaluated = r.evaluated;
        st2.final_accuracy = r.test_accuracy;
        st2.final_loss = r.test_loss;
      }
      --st2.evals_pending;
      maybe_finalize(self);
    };
    if (!evaluate_params) {
      report(out);
      return;
    }
    if (last) s.final_params = g.params;
    self->request(s.evaluator, request_timeout(self), eval_atom::value, eval_request{e, std::move(g.params)})
        .then(
            [=](const eval_reply& ev) {
              epoch_summary r = out;
              r.evaluated = true;
              r.test_accuracy = ev.accuracy;
              r.test_loss = ev.loss;
              report(r);
            },
            [=](caf::error& err) { fail(self, make_error(errc::bad_job, "evaluation failed: " + describe(err))); });
  });
}

// Closes every epoch all live workers have finished. The last epoch is closed only once
// training is over, so its evaluation sees every gradient (all pushes are acknowledged
// before a worker reports done).
void check_epochs(coord_pointer self) {
  auto& st = self->state;
  while (st.epochs_closed < st.job.train.epochs) {
    const std::int32_t e = st.epochs_closed;
    if (e + 1 == st.job.train.epochs && !st.training_done) return;
    bool complete = st.epochs.count(e) > 0;
    for (const auto& w : st.workers)
      if (w.live && !w.done && w.epochs_reported <= e) complete = false;
    if (!complete) return;
    ++st.epochs_closed;
    close_epoch(self, e);
  }
}

void maybe_finalize(coord_pointer self) {
  auto& st = self->state;
  if (!st.training_done || st.finished || st.evals_pending > 0 || st.epochs_closed < st.job.train.epochs) return;
  collect(self, false, -1, [=](gather& g) {
    auto& s = self->state;
    const stats_total t = sum_stats(g.stats);
    job_result r;
    r.mode = std::string(name_of(s.job.mode));
    r.workers = s.job.workers;
    r.servers = s.job.servers;
    r.pipeline_stages = s.job.pipeline_stages;
    r.microbatches = s.job.microbatches;
    r.bubble = s.bubble ? s.bubble->fraction() : 0.0;
    r.peak_stored = s.peak_stored;
    r.epochs = s.job.train.epochs;
    r.evaluated = s.final_evaluated;
    r.test_accuracy = s.final_accuracy;
    r.test_loss = s.final_loss;
    r.train_seconds = std::chrono::duration<double>(s.t_end - s.t_start).count();
    r.samples = s.samples;
    r.samples_per_second = r.train_seconds > 0 ? static_cast<double>(s.samples) / r.train_seconds : 0.0;
    if (s.first_done) {
      const double secs = std::chrono::duration<double>(s.first_done->first - s.t_start).count();
      r.steady_samples_per_second = secs > 0 ? static_cast<double>(s.first_done->second) / secs : 0.0;
    }
    r.mean_staleness = t.staleness_count > 0 ? static_cast<double>(t.staleness_sum) / t.staleness_count : 0.0;
    r.max_staleness = t.staleness_max;
    r.workers_lost = s.workers_lost;
    r.rejected = t.rejected;
    r.params = std::move(s.final_params);
    succeed(self, std::move(r));
  });
}

void check_training_done(coord_pointer self) {
  auto& st = self->state;
  if (!st.started || st.training_done || st.finished) return;
  bool any_done = false;
  for (const auto& w : st.workers) {
    if (w.live && !w.done) return;
    any_done = any_done || w.done;
  }
  if (!any_done) {
    fail(self, make_error(errc::all_workers_lost,
                          "every worker died before finishing; the first: " +
                              (st.first_loss.empty() ? std::string("see the log") : st.first_loss)));
    return;
  }
  st.training_done = true;
  st.t_end = clock_type::now();
  check_epochs(self);
  maybe_finalize(self);
}

// Note [Shard handles across nodes]
// In one process the welcome carries the shards' handles. Across nodes it carries only
// their addresses: a handle forwarded by the coordinator makes the worker's node route
// to the shard through the coordinator's node, and with CAF 0.17 such indirect routes
// broke TLS connections when a node left. Workers connect to each shard directly.
// Pipeline neighbours go the same way: by handle in one process, by address (each member
// publishes itself) across nodes.
worker_welcome welcome_for(coord_pointer self, std::uint32_t rank, std::int64_t resume_clock) {
  const auto& s = self->state;
  const bool by_address = !s.shard_hosts.empty() && !s.shard_hosts.front().empty();
  worker_welcome w;
  w.rank = rank;
  w.world = s.job.workers;
  w.job = s.job;
  w.table = s.table;
  if (!by_address) w.shards = s.shards;
  w.shard_hosts = s.shard_hosts;
  w.shard_ports = s.shard_ports;
  w.resume_clock = resume_clock;
  const std::uint32_t k = s.job.pipeline_stages, stage = rank % k;
  auto wire = [&](std::uint32_t r, caf::actor& handle, std::string& host, std::uint16_t& port) {
    const worker_info& n = s.workers[r];
    if (!n.host.empty()) {
      host = n.host;
      port = n.port;
    } else {
      handle = n.handle;
    }
  };
  if (stage > 0) wire(rank - 1, w.prev, w.prev_host, w.prev_port);
  if (stage + 1 < k) wire(rank + 1, w.next, w.next_host, w.next_port);
  w.group = s.workers[rank].group;
  return w;
}

// A worker joining a running job takes the rank of one that died. In sync it joins at a
// round a little ahead of the fastest worker, so every shard can add it before that round
// opens; in async/ssp it starts level with the slowest live worker.
void admit_replacement(coord_pointer self, caf::typed_response_promise<worker_welcome> promise, caf::actor handle,
                       std::uint32_t rank);

// Returns the rank of a worker that died and has not been replaced, if any.
std::optional<std::uint32_t> free_rank(coord_pointer self) {
  for (std::uint32_t r = 0; r < self->state.workers.size(); ++r)
    if (!self->state.workers[r].live && !self->state.workers[r].done) return r;
  return std::nullopt;
}

caf::result<worker_welcome> rejoin(coord_pointer self, caf::actor handle) {
  auto& st = self->state;
  if (st.job.pipeline_stages > 1)
    return make_error(errc::cluster_full, "the job is running and a pipeline stage cannot be replaced in a running "
                                          "job; its replica stopped when the stage was lost");
  if (st.job.local_reduce)
    return make_error(errc::cluster_full, "the job is running with --local-reduce, whose local groups cannot take "
                                          "new members; a group stops as a whole when one of its workers is lost");
  auto promise = self->make_response_promise<worker_welcome>();
  self->monitor(handle);
  if (auto rank = free_rank(self)) {
    admit_replacement(self, promise, handle, *rank);
  } else {
    event(self, "a worker joined the running job; it stands by until a worker dies");
    st.standby.emplace_back(promise, handle);
  }
  return promise;
}

void admit_replacement(coord_pointer self, caf::typed_response_promise<worker_welcome> promise, caf::actor handle,
                       std::uint32_t rank) {
  auto& st = self->state;
  std::int64_t slowest = std::numeric_limits<std::int64_t>::max(), fastest = 0;
  for (const worker_info& w : st.workers)
    if (w.live && !w.done) {
      slowest = std::min(slowest, w.clock);
      fastest = std::max(fastest, w.clock);
    }
  if (slowest == std::numeric_limits<std::int64_t>::max()) slowest = fastest = 0;
  const std::int64_t clock = st.job.mode == sync_mode::sync ? fastest + 2 : slowest;
  worker_info& w = st.workers[rank];
  w = worker_info{};
  w.handle = handle;
  w.clock = clock;
  w.epochs_reported = static_cast<std::int32_t>(clock / std::max<std::int64_t>(1, steps_per_epoch(st.job)));
  st.last_progress = clock_type::now();
  auto acks = std::make_shared<std::size_t>(st.shards.size());
  for (auto& shard : st.shards)
    self->request(shard, request_timeout(self), join_atom::value, member_joined{rank, clock})
        .then(
            [=](caf::ok_atom) mutable {
              if (--*acks == 0) promise.deliver(welcome_for(self, rank, clock));
            },
            [=](caf::error& e) { fail(self, make_error(errc::shard_lost, "a shard did not admit the rejoining worker: " + describe(e))); });
  event(self, "worker " + std::to_string(rank) + " rejoined at clock " + std::to_string(clock));
}

// With --local-reduce, groups the workers that share a node (Note [Local groups] in
// local_groups.cpp) and says so.
void form_local_groups(coord_pointer self) {
  auto& st = self->state;
  if (!st.job.local_reduce) return;
  std::vector<std::string> localities;
  for (const auto& w : st.workers) localities.push_back(w.locality);
  const auto groups = local_groups(localities);
  bool any = false;
  for (std::uint32_t r = 0; r < groups.size(); ++r) {
    st.workers[r].group = groups[r];
    if (groups[r].empty() || groups[r].front() != r) continue;
    any = true;
    std::string names;
    for (std::uint32_t m : groups[r]) names += (names.empty() ? "" : ", ") + std::to_string(m);
    event(self, "local group at " + st.workers[r].locality + ": workers " + names + " (worker " + std::to_string(r) +
                    " leads and talks to the shards)");
  }
  if (!any)
    event(self, "--local-reduce: no two workers share a node (GPUs of one machine, or one process on the CPU), so "
                "every worker pushes and pulls on its own");
}

void maybe_start(coord_pointer self) {
  auto& st = self->state;
  if (st.starting || st.shards.size() < st.job.servers || st.pending_joins.size() < members(st.job)) return;
  st.starting = true;
  form_local_groups(self);
  membership m;
  for (std::uint32_t r = 0; r < members(st.job); ++r) {
    if (!pushes_to_shards(st.workers[r].group, r)) continue;
    m.workers.push_back(r);
    m.stages.push_back(r % st.job.pipeline_stages);
  }
  auto go = [=] {
    auto& s = self->state;
    s.started = true;
    s.t_start = s.epoch_start = s.last_progress = clock_type::now();
    for (std::uint32_t r = 0; r < s.pending_joins.size(); ++r) s.pending_joins[r].deliver(welcome_for(self, r, 0));
    s.pending_joins.clear();
    count_nodes(self);
  };
  if (st.shards.empty()) {  // --servers 0
    go();
    return;
  }
  auto acks = std::make_shared<std::size_t>(st.shards.size());
  for (auto& shard : st.shards) {
    self->request(shard, request_timeout(self), start_atom::value, m)
        .then(
            [=](caf::ok_atom) {
              if (--*acks == 0) go();
            },
            [=](caf::error& e) { fail(self, make_error(errc::shard_lost, "a shard did not start: " + describe(e))); });
  }
}

caf::error check_job_id(coord_pointer self, const std::string& id) {
  if (id == self->state.job.job_id) return caf::none;
  return make_error(errc::bad_job, "this node was started for job '" + id + "' but the coordinator runs job '" +
                                       self->state.job.job_id + "'; check its configuration");
}

void on_down(coord_pointer self, caf::down_msg& dm) {
  auto& st = self->state;
  if (st.finished) return;
  for (std::uint32_t s = 0; s < st.shards.size(); ++s)
    if (dm.source == st.shards[s].address()) {
      fail(self, make_error(errc::shard_lost, "shard " + std::to_string(s) + " died (" + caf::to_string(dm.reason) +
                                                  "); its parameters are gone and recovery from checkpoints is not "
                                                  "supported yet, so the job stops"));
      return;
    }
  std::erase_if(st.standby, [&](const auto& p) { return p.second.address() == dm.source; });
  for (std::uint32_t r = 0; r < st.workers.size(); ++r) {
    worker_info& w = st.workers[r];
    if (dm.source != w.handle.address() || !w.live) continue;
    if (w.done) return;  // finished and quit
    w.live = false;
    if (troupe_code(dm.reason) == errc::diverged) {
      fail(self, dm.reason);
      return;
    }
    ++st.workers_lost;
    if (st.m) st.m->workers_lost->Increment();
    count_nodes(self);
    if (st.first_loss.empty()) st.first_loss = member_name(st.job, r) + ": " + describe(dm.reason);
    event(self, member_name(st.job, r) + " is gone (" + describe(dm.reason) + "); continuing with " +
                    std::to_string(live_workers(self)) + (st.job.pipeline_stages > 1 ? " members" : " workers"));
    for (auto& shard : st.shards) self->send(shard, left_atom::value, r);
    if (!st.standby.empty()) {
      auto [promise, handle] = st.standby.front();
      st.standby.erase(st.standby.begin());
      admit_replacement(self, promise, handle, r);
      return;
    }
    check_epochs(self);
    check_training_done(self);
    return;
  }
}

void on_tick(coord_pointer self) {
  auto& st = self->state;
  if (st.finished) return;
  if (st.training_done) return;  // only the final evaluation is left; it has its own timeout
  const auto idle = clock_type::now() - st.last_progress;
  if (idle > std::chrono::milliseconds(st.job.stall_timeout_ms)) {
    std::string who;
    if (!st.started) {
      who = std::to_string(st.shards.size()) + " of " + std::to_string(st.job.servers) + " shards and " +
            std::to_string(st.pending_joins.size()) + " of " + std::to_string(members(st.job)) + " workers joined";
    } else {
      for (std::uint32_t r = 0; r < st.workers.size(); ++r)
        if (st.workers[r].live && !st.workers[r].done)
          who += (who.empty() ? "" : ", ") + member_name(st.job, r) + " at clock " +
                 std::to_string(st.workers[r].clock);
    }
    fail(self, make_error(errc::stalled, "no progress for " + std::to_string(st.job.stall_timeout_ms / 1000) +
                                             " s (" + who + ")"));
    return;
  }
  update_step_rates(self);
  self->delayed_send(self, std::chrono::seconds(1), caf::tick_atom::value);
}

coordinator_actor::behavior_type coordinator(coord_pointer self, job_spec job, model m,
                                             std::shared_ptr<const dataset_split> data, job_callbacks cb,
                                             observability obs) {
  auto& st = self->state;
  if (obs.metrics) st.m = obs.metrics->coordinator();
  st.last_tick = clock_type::now();
  // Sync gradients are never stale. Under ssp with bound s, a worker may read parameters
  // missing up to s clocks of every other worker and push up to s clocks ahead, so
  // staleness stays below (2s + 2) * workers updates. Async has no bound to export.
  if (st.m && job.mode == sync_mode::sync) st.m->staleness_bound->Set(0);
  if (st.m && job.mode == sync_mode::ssp)
    st.m->staleness_bound->Set(static_cast<double>((2 * job.staleness + 2) * static_cast<std::int64_t>(members(job))));
  st.job = std::move(job);
  if (st.job.servers > 0) st.table = partition_parameters(m, st.job.servers, st.job.big_array_bound);
  st.num_params = m.num_params();
  st.layout = m;
  st.peak_stored.assign(st.job.pipeline_stages, 0);
  if (st.job.pipeline_stages > 1) st.bubble.emplace(st.job.pipeline_stages);
  st.data = data;
  st.cb = std::move(cb);
  if (st.job.simulate_compute_ms <= 0.0) st.evaluator = spawn_evaluator(self->system(), m, data);
  st.last_progress = clock_type::now();
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  self->delayed_send(self, std::chrono::seconds(1), caf::tick_atom::value);
  return {
      [=](join_atom, const shard_join& j) -> caf::result<shard_welcome> {
        auto& s = self->state;
        if (auto err = check_job_id(self, j.job_id)) return err;
        if (s.shards.size() >= s.job.servers)
          return make_error(errc::cluster_full, "the job already has its " + std::to_string(s.job.servers) + " shards");
        auto handle = caf::actor_cast<shard_actor>(self->current_sender());
        self->monitor(handle);
        const auto index = static_cast<std::uint32_t>(s.shards.size());
        s.shards.push_back(handle);
        s.shard_hosts.push_back(j.host);
        s.shard_ports.push_back(j.port);
        count_nodes(self);
        s.last_progress = clock_type::now();
        // Deliver the welcome before any start message can follow it (same sender, same order).
        auto promise = self->make_response_promise<shard_welcome>();
        promise.deliver(shard_welcome{index, s.job, s.table.ranges_of(index)});
        maybe_start(self);
        return promise;
      },
      [=](join_atom, const worker_join& j) -> caf::result<worker_welcome> {
        auto& s = self->state;
        if (auto err = check_job_id(self, j.job_id)) return err;
        auto handle = caf::actor_cast<caf::actor>(self->current_sender());
        if (s.started && !s.training_done) return rejoin(self, handle);
        if (s.starting || s.pending_joins.size() >= members(s.job))
          return make_error(errc::cluster_full,
                            "the job already has its " + std::to_string(members(s.job)) + " workers" +
                                (s.job.pipeline_stages > 1 ? " (replicas x pipeline stages)" : ""));
        self->monitor(handle);
        worker_info info;
        info.handle = handle;
        info.host = j.host;
        info.port = j.port;
        info.locality = j.locality;
        s.workers.push_back(std::move(info));
        s.last_progress = clock_type::now();
        auto promise = self->make_response_promise<worker_welcome>();
        s.pending_joins.push_back(promise);
        maybe_start(self);
        return promise;
      },
      [=](group_atom, group_id& g) {
        auto& s = self->state;
        const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (g.leader >= s.workers.size() || s.workers[g.leader].group.empty() ||
            s.workers[g.leader].group.front() != g.leader || s.workers[g.leader].handle.address() != sender) {
          spdlog::warn("coordinator: ignored a local group id from {} claiming to lead worker {}'s group",
                       caf::to_string(sender), g.leader);
          return;
        }
        // Sent as the coordinator, so a member can tell the relay from a stranger's id.
        for (std::uint32_t r : s.workers[g.leader].group)
          if (r != g.leader && s.workers[r].live) caf::unsafe_send_as(self, s.workers[r].handle, group_atom::value, g);
      },
      [=](progress_atom, const step_report& r) {
        auto& s = self->state;
        if (r.rank >= s.workers.size() || !s.workers[r.rank].live) return;
        if (!s.first_step_seen) {
          s.first_step_seen = true;
          s.t_start = s.epoch_start = clock_type::now();
        }
        s.workers[r.rank].clock = r.clock;
        s.samples += r.samples;
        s.last_progress = clock_type::now();
        if (s.bubble) s.bubble->note(r);
        if (s.m) {
          std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = 0;
          for (const auto& w : s.workers)
            if (w.live && !w.done) {
              lo = std::min(lo, w.clock);
              hi = std::max(hi, w.clock);
            }
          if (hi >= lo) s.m->clock_spread->Set(static_cast<double>(hi - lo));
        }
      },
      [=](epoch_atom, const worker_epoch& r) {
        auto& s = self->state;
        if (r.rank >= s.workers.size() || !s.workers[r.rank].live) return;
        auto& agg = s.epochs[r.epoch];
        agg.loss_sum += r.loss_sum;
        agg.steps += r.steps;
        agg.samples += r.samples;
        s.workers[r.rank].epochs_reported = r.epoch + 1;
        s.last_progress = clock_type::now();
        if (s.shards.empty() && !r.params.empty()) {  // --servers 0: this stage's part of the model
          const auto spans = job_stage_spans(s.job, *s.layout);
          const stage_span& span = spans[r.rank % s.job.pipeline_stages];
          if (r.params.numel() != span.numel) {
            fail(self, make_error(errc::bad_shape, member_name(s.job, r.rank) + " reported " +
                                                       std::to_string(r.params.numel()) + " parameters, expected " +
                                                       std::to_string(span.numel)));
            return;
          }
          auto& full = s.epoch_params[r.epoch];
          if (full.empty()) full = tensor({s.num_params});
          copy(full.view().flat(span.param_offset, span.numel), r.params);
        }
        check_epochs(self);
      },
      [=](done_atom, const worker_done& r) {
        auto& s = self->state;
        if (r.rank >= s.workers.size()) return;
        s.workers[r.rank].done = true;
        auto& peak = s.peak_stored[r.rank % s.job.pipeline_stages];
        peak = std::max(peak, r.peak_stored);
        s.workers[r.rank].clock = r.clock;
        count_nodes(self);
        s.last_progress = clock_type::now();
        if (!s.first_done) s.first_done = std::make_pair(s.last_progress, s.samples);
        check_training_done(self);
      },
      [=](run_atom) -> caf::result<job_result> {
        auto& s = self->state;
        if (s.result) return *s.result;
        if (s.failure) return s.failure;
        auto promise = self->make_response_promise<job_result>();
        s.run_promise = promise;
        return promise;
      },
      [=](caf::tick_atom) { on_tick(self); },
  };
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& sys, job_spec job, const model& m,
                                    std::shared_ptr<const dataset_split> data, job_callbacks cb,
                                    observability obs) {
  return sys.spawn(coordinator, std::move(job), m, std::move(data), std::move(cb), std::move(obs));
}

}  // namespace troupe
