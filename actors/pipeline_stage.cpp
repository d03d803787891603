// pipeline_stage: the member's training loop as a chain of responses and messages (its
// joining is member_wiring.cpp).
#include "actors/pipeline_stage.hpp"

#include <algorithm>
#include <cmath>
#include <thread>

#include "actors/member_state.hpp"
#include "core/pipeline_layout.hpp"
#include "tensor/random.hpp"
#include "tensor/sampler.hpp"

namespace troupe {

namespace member_detail {

std::string who(const member_state& st) {
  if (!pipelined(st)) return "worker " + std::to_string(st.rank);
  return "stage " + std::to_string(st.stage) + " of replica " + std::to_string(st.replica);
}

void start_pulls(stage_pointer self);
void run_actions(stage_pointer self);

// name: a literal. Forward and backward spans carry their step and microbatch.
void trace_span(stage_pointer self, const char* name, wall::time_point begin, wall::time_point end,
                std::int32_t microbatch = -1) {
  auto& st = self->state;
  if (st.opts.obs.trace) st.opts.obs.trace->span(st.track, name, begin, end, microbatch >= 0 ? st.clock : -1, microbatch);
}

double seconds_between(wall::time_point a, wall::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::int64_t micros(wall::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

void fail(stage_pointer self, caf::error e) {
  spdlog::error("{}: {}", who(self->state), describe(e));
  self->quit(std::move(e));
}



void maybe_finish(stage_pointer self) {
  auto& st = self->state;
  if (!st.finishing || st.acks_pending > 0) return;
  spdlog::info("{}: done at clock {} ({} of its gradients refused)", who(st), st.clock, st.rejected);
  self->send(st.coordinator, done_atom::value, worker_done{st.rank, st.clock, st.rejected, st.peak});
  self->quit();
}

void begin_epoch(stage_pointer self, std::int64_t first_step = 0) {
  auto& st = self->state;
  if (st.data)
    st.order = epoch_indices(st.data->train.size(), st.job.train.seed, st.epoch, static_cast<int>(st.replica),
                             static_cast<int>(st.world));
  st.step_in_epoch = first_step;
  st.epoch_loss = 0.0;
  st.epoch_samples = 0;
  st.epoch_start = clock_type::now();
}

// Sleeps for this stage's share of the simulated compute of the action (forward one
// third, backward two thirds of simulate_compute_ms per minibatch), slowed if this is
// the slow member.
void simulate(stage_pointer self, bool forward) {
  auto& st = self->state;
  const double factor = static_cast<std::int32_t>(st.rank) == st.job.slow_worker ? st.job.slow_factor : 1.0;
  const double share = (forward ? 1.0 : 2.0) / (3.0 * st.parts);
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(st.job.simulate_compute_ms * share * factor));
}

// The slow member repeats (factor - 1) times the time real compute took.
void slow_down(stage_pointer self, clock_type::duration took) {
  auto& st = self->state;
  if (static_cast<std::int32_t>(st.rank) != st.job.slow_worker || st.job.slow_factor <= 1.0) return;
  std::this_thread::sleep_for(took * (st.job.slow_factor - 1.0));
}

void note_stored(stage_pointer self, int delta) {
  auto& st = self->state;
  st.stored += delta;
  st.peak = std::max(st.peak, st.stored);
  if (st.sm) {
    st.sm->stored_activations->Set(st.stored);
    st.sm->peak_stored_activations->Set(st.peak);
  }
}

// Gathers rows [begin, begin + rows) of the step's minibatch into xb/yb.
void gather_microbatch(stage_pointer self, std::int64_t begin, std::int64_t rows) {
  auto& st = self->state;
  const auto idx = std::span<const std::int64_t>(st.order).subspan(st.step_in_epoch * st.job.train.batch_size + begin, rows);
  gather_batch(st.xb.view().slice(0, rows), st.yb.view().slice(0, rows), st.data->train, idx);
}

tensor copy_of(const_tensor_view v) {
  tensor t = tensor::uninitialized(v.sizes());
  copy(t, v);
  return t;
}

// Runs the forward of microbatch mb if its input is here. Returns false to wait.
bool try_forward(stage_pointer self, int mb) {
  auto& st = self->state;
  tensor received;
  if (!first_stage(st)) {
    auto t = st.acts_in->take(st.clock, mb);
    if (!t) return false;
    received = std::move(*t);
  }
  const std::int64_t begin = microbatch_begin(st.batch, st.parts, mb), rows = microbatch_rows(st.batch, st.parts, mb);
  const auto t0 = wall::now();
  const auto c0 = clock_type::now();
  if (!st.first_action) st.first_action = t0;
  tensor out_msg;
  if (simulated(st)) {
    simulate(self, true);
    if (!last_stage(st)) out_msg = tensor(st.net->output_shape().prepend(rows));
  } else {
    if (first_stage(st) || last_stage(st)) gather_microbatch(self, begin, rows);
    const_tensor_view input = first_stage(st) ? const_tensor_view(st.xb.view().slice(0, rows)) : received.view();
    const int slot = st.rep->forward(input);
    st.slot_of[mb] = slot;
    if (last_stage(st))
      st.step_loss += st.rep->loss(slot, st.yb.view().slice(0, rows), 1.0f / static_cast<float>(st.batch)) *
                      static_cast<double>(rows) / static_cast<double>(st.batch);
    else
      out_msg = st.rep->output_on_host(slot);
    slow_down(self, clock_type::now() - c0);
  }
  const auto t1 = wall::now();
  st.busy += seconds_between(t0, t1);
  st.forward_s += seconds_between(t0, t1);
  note_stored(self, +1);
  trace_span(self, "forward", t0, t1, mb);
  if (!last_stage(st))
    self->send(st.next, activation_atom::value, activation{st.replica, st.stage, st.clock, mb, std::move(out_msg)});
  return true;
}

// Runs the backward of microbatch mb if its output gradient is here. Returns false to wait.
bool try_backward(stage_pointer self, int mb) {
  auto& st = self->state;
  tensor received;
  if (!last_stage(st)) {
    auto t = st.grads_in->take(st.clock, mb);
    if (!t) return false;
    received = std::move(*t);
  }
  const std::int64_t rows = microbatch_rows(st.batch, st.parts, mb);
  const auto t0 = wall::now();
  const auto c0 = clock_type::now();
  tensor out_msg;
  if (simulated(st)) {
    simulate(self, false);
    if (!first_stage(st)) out_msg = tensor(st.net->input_shape().prepend(rows));
  } else {
    const_tensor_view gin = st.rep->backward(st.slot_of[mb], received.empty() ? const_tensor_view() : received.view());
    if (!first_stage(st)) out_msg = copy_of(gin);
    slow_down(self, clock_type::now() - c0);
  }
  const auto t1 = wall::now();
  st.busy += seconds_between(t0, t1);
  st.backward_s += seconds_between(t0, t1);
  note_stored(self, -1);
  if (st.sm) st.sm->microbatches->Increment();
  trace_span(self, "backward", t0, t1, mb);
  if (!first_stage(st))
    self->send(st.prev, act_grad_atom::value, activation_grad{st.replica, st.stage, st.clock, mb, std::move(out_msg)});
  return true;
}

// The parameters are fresh: plan the minibatch's actions and run what can run.
void begin_step(stage_pointer self) {
  auto& st = self->state;
  st.in_step = true;
  st.batch = batch_rows(st.job, st.step_in_epoch);
  st.parts = microbatches_for(st.job, st.batch);
  st.actions = stage_actions(st.job.schedule, static_cast<int>(st.stages), static_cast<int>(st.stage), st.parts);
  st.next_action = 0;
  st.slot_of.assign(static_cast<std::size_t>(st.parts), -1);
  st.step_loss = st.busy = st.forward_s = st.backward_s = 0.0;
  st.params_ready = wall::now();
  st.first_action.reset();
  if (st.rep) st.rep->zero_grads();
  run_actions(self);
}

void push_all(stage_pointer self) {
  auto& st = self->state;
  const auto p0 = wall::now();
  const tensor& grads = simulated(st) ? st.synthetic_grad : st.rep->fetch_grads();
  for (std::uint32_t s : st.active) {
    tensor g = tensor::uninitialized({st.slice_numel[s]});
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
              spdlog::warn("{}: shard {} refused the gradient of clock {}: {}", who(self->state), s, clock, describe(e));
              maybe_finish(self);
            });
  }
  if (!st.active.empty()) trace_span(self, "push", p0, wall::now());
}

// Every action of the minibatch is done: update (through the shards or locally), report.
void end_step(stage_pointer self) {
  auto& st = self->state;
  st.in_step = false;
  if (st.dm) {
    const troupe_memory_stats mem = st.backend->memory();
    st.dm->record(mem.bytes_in_use, mem.bytes_cached, mem.cache_hits, mem.device_mallocs);
  }
  const auto window_end = wall::now();
  const bool reports_loss = last_stage(st);
  const double loss = reports_loss ? st.step_loss : 0.0;
  if (reports_loss && !simulated(st) && !std::isfinite(loss)) {
    fail(self, make_error(errc::diverged, "the training loss became " + std::to_string(loss) + " on " + who(st) +
                                              " at epoch " + std::to_string(st.epoch + 1) +
                                              "; lower --lr or lengthen --warmup-epochs"));
    return;
  }
  if (grouped(st)) {
    const auto r0 = wall::now();
    if (!in_group(self, "gradient all-reduce", [&] { st.rep->all_reduce_grads(*st.comm); })) return;
    trace_span(self, "all-reduce", r0, wall::now());
  }
  if (st.local_opt) {
    const auto u0 = wall::now();
    if (!simulated(st)) {
      st.local_opt->step(st.rep->params(), st.rep->fetch_grads(), st.schedule.at(st.clock));
      st.rep->commit_params();
    }
    trace_span(self, "update", u0, wall::now());
  } else {
    push_all(self);
  }
  const double waited = seconds_between(st.params_ready, window_end) - st.busy;
  trace_span(self, "step", st.step_begin, wall::now());
  const std::int64_t samples = reports_loss ? st.batch : 0;
  if (st.m) {
    st.m->step_seconds->Observe(seconds_between(st.step_begin, wall::now()));
    st.m->forward_seconds->Observe(st.forward_s);
    st.m->backward_seconds->Observe(st.backward_s);
    st.m->samples->Increment(static_cast<double>(samples));
    if (reports_loss) st.m->loss->Set(loss);
    st.m->epoch->Set(st.epoch);
    st.m->learning_rate->Set(st.schedule.at(st.clock));
    st.m->clock->Set(static_cast<double>(st.clock + 1));
  }
  if (st.sm) {
    st.sm->busy_seconds->Increment(st.busy);
    st.sm->bubble_seconds->Increment(std::max(0.0, waited));
  }
  st.epoch_loss += loss;
  st.epoch_samples += samples;
  ++st.clock;
  ++st.step_in_epoch;
  self->send(st.coordinator, progress_atom::value,
             step_report{st.rank, st.clock, st.epoch, loss, samples, st.busy, micros(st.first_action.value_or(window_end)),
                         micros(window_end)});
  if (st.step_in_epoch == st.steps_per_epoch) {
    const double secs = std::chrono::duration<double>(clock_type::now() - st.epoch_start).count();
    worker_epoch report{st.rank, st.epoch, st.epoch_loss, reports_loss ? st.steps_per_epoch : 0, st.epoch_samples, secs,
                        tensor()};
    if (st.local_opt && st.rep) report.params = st.rep->params();
    self->send(st.coordinator, epoch_atom::value, std::move(report));
    if (++st.epoch == st.job.train.epochs) {
      st.finishing = true;
      maybe_finish(self);
      return;
    }
    begin_epoch(self);
  }
  start_pulls(self);
}

void run_actions(stage_pointer self) {
  auto& st = self->state;
  while (st.in_step && st.next_action < st.actions.size()) {
    const pipeline_action a = st.actions[st.next_action];
    if (!(a.forward ? try_forward(self, a.microbatch) : try_backward(self, a.microbatch))) return;  // wait
    ++st.next_action;
  }
  if (st.in_step) end_step(self);
}

void start_pulls(stage_pointer self) {
  auto& st = self->state;
  st.step_begin = wall::now();
  st.pulls_pending = st.active.size();
  if (st.active.empty()) {
    // Nothing to pull (--servers 0, or a local group's member): the step starts from the
    // mailbox, so the loop never recurses and exits and deaths are seen every step.
    self->send(self, next_step_atom::value);
    return;
  }
  for (std::uint32_t s : st.active) {
    self->request(st.shards[s], st.timeout, pull_atom::value, pull_request{s, st.rank, st.clock})
        .then(
            [=](params_reply& r) {
              auto& state = self->state;
              if (r.shard != s || r.params.numel() != state.slice_numel[s] || r.params.type() != dtype::f32) {
                fail(self, make_error(errc::bad_shape, "shard " + std::to_string(s) + " answered with " +
                                                           std::to_string(r.params.numel()) + " parameters, expected " +
                                                           std::to_string(state.slice_numel[s])));
                return;
              }
              if (!simulated(state)) unpack_shard(state.rep->params(), r.params, state.ranges[s]);
              state.base_version[s] = r.version;
              if (state.m) state.m->bytes_received->Increment(static_cast<double>(r.params.nbytes()));
              if (--state.pulls_pending == 0) {
                if (!simulated(state)) state.rep->commit_params();
                if (grouped(state) &&
                    !in_group(self, "parameter broadcast", [&] { state.rep->share_params(*state.comm, true); }))
                  return;
                trace_span(self, "pull", state.step_begin, wall::now());
                if (state.m) state.m->pull_seconds->Observe(seconds_between(state.step_begin, wall::now()));
                begin_step(self);
              }
            },
            [=](caf::error& e) {
              fail(self, make_error(errc::stalled, "pull from shard " + std::to_string(s) + " at clock " +
                                                       std::to_string(self->state.clock) + " failed: " + describe(e)));
            });
  }
}

// Files an activation or activation gradient from `sender` for its action, or returns
// why it is refused (the checks in stage_inbox.hpp). A message from anyone but the
// neighbour is dropped.
template <class Message>
caf::error receive_stage_tensor(stage_pointer self, const caf::actor_addr& sender, Message& msg, bool forward) {
  auto& st = self->state;
  const caf::actor& expected_sender = forward ? st.prev : st.next;
  const std::uint32_t expected_stage = forward ? st.stage - 1 : st.stage + 1;
  if (!expected_sender || sender != expected_sender.address() || msg.replica != st.replica ||
      msg.stage != expected_stage) {
    spdlog::warn("{}: dropped an {} from {} claiming stage {} of replica {}: not this stage's neighbour", who(st),
                 forward ? "activation" : "activation gradient", caf::to_string(sender), msg.stage, msg.replica);
    return caf::none;
  }
  auto& box = forward ? *st.acts_in : *st.grads_in;
  if (auto refused = box.file(st.clock, st.step_in_epoch, msg.step, msg.microbatch, std::move(msg.data)))
    return make_error(refused->code, who(st) + " got " + refused->detail + " from stage " + std::to_string(msg.stage));
  run_actions(self);
  return caf::none;
}

// The handler of both messages: checks now, or once the neighbours are wired.
template <class Message>
void on_stage_tensor(stage_pointer self, Message& msg, bool forward) {
  auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (!self->state.wired) {
    if (self->state.early.size() >= 4096) {  // no stage sends more before it is answered
      spdlog::warn("{}: dropped a stage tensor from {}: too many before the job started", who(self->state),
                   caf::to_string(sender));
      return;
    }
    self->state.early.push_back(
        [=, m = std::move(msg)]() mutable { return receive_stage_tensor(self, sender, m, forward); });
    return;
  }
  if (auto err = receive_stage_tensor(self, sender, msg, forward)) fail(self, std::move(err));
}

bool setup(stage_pointer self, worker_welcome& w) {
  auto& st = self->state;
  st.welcomed = true;
  st.clock = w.resume_clock;
  st.rank = w.rank;
  st.world = w.world;
  st.job = std::move(w.job);
  st.stages = st.job.pipeline_stages;
  st.replica = st.rank / st.stages;
  st.stage = st.rank % st.stages;
  st.prev = w.prev;
  st.next = w.next;
  st.shards = std::move(w.shards);
  st.shards.resize(w.table.shards());  // by address: filled by connect_peers
  st.timeout = std::chrono::milliseconds(st.job.request_timeout_ms);
  st.steps_per_epoch = steps_per_epoch(st.job);
  st.schedule = job_schedule(st.job);
  if (st.opts.obs.metrics) {
    st.m = st.opts.obs.metrics->worker(st.rank);
    if (pipelined(st)) st.sm = st.opts.obs.metrics->stage(st.replica, st.stage);
  }
  if (st.opts.obs.trace)
    st.track = st.opts.obs.trace->track(pipelined(st) ? "replica " + std::to_string(st.replica) + " stage " +
                                                            std::to_string(st.stage)
                                                      : "worker " + std::to_string(st.rank));
  auto full = build_model(st.job);
  if (!full) {
    fail(self, make_error(errc::bad_job, full.error().message));
    return false;
  }
  const auto spans = job_stage_spans(st.job, *full);
  if (spans.size() != st.stages) {
    fail(self, make_error(errc::bad_job, "the job's cut points do not make " + std::to_string(st.stages) + " stages"));
    return false;
  }
  const stage_span& span = spans[st.stage];
  st.net = pipelined(st) ? full->stage(span.first_layer, span.last_layer) : *full;
  st.acts_in.emplace(st.job, st.net->input_shape(), "activation");
  st.grads_in.emplace(st.job, st.net->output_shape(), "activation gradient");
  for (std::uint32_t s = 0; s < w.table.shards(); ++s) {
    st.ranges.push_back(stage_ranges(w.table.ranges_of(s), span));
    std::int64_t n = 0;
    for (const auto& r : st.ranges.back()) n += r.length;
    st.slice_numel.push_back(n);
    if (n > 0) st.active.push_back(s);
  }
  st.group = w.group;
  if (grouped(st) && !group_leader(st)) st.active.clear();  // its leader talks to the shards
  st.base_version.assign(st.shards.size(), 0);
  if (st.job.servers == 0) st.local_opt.emplace(st.job.train.optimizer, st.net->num_params());
  if (simulated(st)) {
    // A fixed, small, finite gradient: enough for the shards to do their real work.
    st.synthetic_grad = tensor({st.net->num_params()});
    rng r(derive_seed(st.job.train.seed, {0x51, st.rank}));
    float* g = st.synthetic_grad.data<float>();
    for (std::int64_t i = 0; i < st.net->num_params(); ++i) g[i] = 1e-4f * r.normal();
    return true;
  }
  if (first_stage(st) || last_stage(st)) {
    auto data = st.opts.data(st.job);
    if (!data) {
      fail(self, make_error(errc::bad_job, data.error().message));
      return false;
    }
    st.data = std::move(*data);
    if (st.data->train.size() != st.job.train_size) {
      fail(self, make_error(errc::bad_job, who(st) + "'s training set has " + std::to_string(st.data->train.size()) +
                                               " samples but the job has " + std::to_string(st.job.train_size)));
      return false;
    }
  }
  const std::int64_t max_rows = (st.job.train.batch_size + st.job.microbatches - 1) / st.job.microbatches;
  const auto plan = stage_actions(st.job.schedule, static_cast<int>(st.stages), static_cast<int>(st.stage),
                                  microbatches_for(st.job, st.job.train.batch_size));
  if (st.opts.compute.where.kind != device_kind::cpu && !simulated(st)) {
    if (st.opts.compute.spread_over_devices) {
      int count = 0;
      auto table = backend_table(st.opts.compute.where.kind);
      if (table && (*table)->device_count(&count) == 0 && count > 0)
        st.opts.compute.where.index = static_cast<int>(st.rank % static_cast<std::uint32_t>(count));
    }
    auto b = backend_context::open(st.opts.compute.where);
    if (!b) {
      fail(self, make_error(errc::bad_job, who(st) + ": " + b.error().message));
      return false;
    }
    st.backend = std::make_unique<backend_context>(std::move(b).value());
    st.exec = compute(*st.backend);
    if (st.opts.compute.tf32) st.backend->call("set_tf32", &troupe_backend_v1::set_tf32, 1);
    if (st.opts.obs.metrics) st.dm = st.opts.obs.metrics->device(st.rank, to_string(st.opts.compute.where));
  } else if (grouped(st)) {  // the CPU backend, for its collectives; the math is the host's
    st.backend = std::make_unique<backend_context>(backend_context::open(cpu_device).value());
    st.exec = compute(*st.backend);
  }
  st.rep = std::make_unique<stage_replica>(*st.net, first_stage(st), last_stage(st), max_rows, peak_stored(plan),
                                           st.exec);
  if (st.local_opt) {
    st.net->init_params(st.rep->params(), st.job.train.seed);
    st.rep->commit_params();
  }
  if (st.data) {
    st.xb = tensor(st.data->train.sample_shape().prepend(max_rows));
    st.yb = tensor({max_rows}, dtype::i32);
  }
  return true;
}

// Starts (or, for a worker that replaces a dead one, resumes) the loop at st.clock.
void start_training(stage_pointer self) {
  auto& st = self->state;
  if (grouped(st) && !st.comm) {
    open_group(self);  // comes back here once the group's communicator is open
    return;
  }
  spdlog::info("{} ({} of {} members): training {} samples per epoch against {} shards{}", who(st), st.rank,
               st.world * st.stages, samples_per_worker(st.job), st.active.size(),
               st.clock > 0 ? ", resuming at clock " + std::to_string(st.clock) : std::string());
  st.epoch = static_cast<std::int32_t>(st.clock / std::max<std::int64_t>(1, st.steps_per_epoch));
  if (st.epoch >= st.job.train.epochs) {
    st.finishing = true;
    maybe_finish(self);
    return;
  }
  begin_epoch(self, st.clock % st.steps_per_epoch);
  st.wired = true;
  for (auto& replay : std::exchange(st.early, {}))
    if (auto err = replay()) {
      fail(self, std::move(err));
      return;
    }
  start_pulls(self);
}


caf::behavior stage_actor(stage_pointer self, coordinator_actor coordinator, stage_options opts) {
  self->state.coordinator = coordinator;
  self->state.opts = std::move(opts);
  self->monitor(coordinator);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source == coordinator.address()) {
      spdlog::error("{}: the coordinator went away ({}); stopping", who(st), caf::to_string(dm.reason));
      self->quit(dm.reason);
      return;
    }
    const bool prev = st.prev && dm.source == st.prev.address();
    const bool next = st.next && dm.source == st.next.address();
    if (!prev && !next) return;
    if (dm.reason == caf::exit_reason::normal) return;
    fail(self, make_error(errc::stage_lost, "stage " + std::to_string(prev ? st.stage - 1 : st.stage + 1) +
                                                " of replica " + std::to_string(st.replica) + " is gone (" +
                                                describe(dm.reason) + "); " + who(st) +
                                                " stops, since its pipeline cannot finish a step without it"));
  });
  return {
      [=](join_atom, std::string host, std::uint16_t port) {
        auto& st = self->state;
        self->request(st.coordinator, st.opts.join_timeout, join_atom::value,
                      worker_join{st.opts.job_id, std::move(host), port, locality(st.opts.compute.where)})
            .then(
                [=](worker_welcome& w) {
                  if (setup(self, w)) connect_peers(self, w);
                },
                [=](caf::error& e) { fail(self, e); });
      },
      [=](activation_atom, activation& a) { on_stage_tensor(self, a, true); },
      [=](act_grad_atom, activation_grad& g) { on_stage_tensor(self, g, false); },
      [=](stage_hello_atom, std::uint32_t replica, std::uint32_t stage) { on_stage_hello(self, replica, stage); },
      [=](next_step_atom) {
        auto& st = self->state;
        if (grouped(st) && !in_group(self, "parameter broadcast", [&] { st.rep->share_params(*st.comm, false); }))
          return;
        begin_step(self);
      },
      [=](group_atom, group_id& g) { on_group_id(self, g); },
      [=](connect_retry_atom, const std::string& peer) { on_connect_retry(self, peer); },
  };
}

}  // namespace member_detail

caf::actor spawn_pipeline_stage(caf::actor_system& sys, coordinator_actor coordinator, stage_options opts) {
  return sys.spawn<caf::detached>(member_detail::stage_actor, std::move(coordinator), std::move(opts));
}

void join_as_member(const caf::actor& member, std::string host, std::uint16_t port) {
  caf::anon_send(member, join_atom::value, std::move(host), port);
}

}  // namespace troupe
