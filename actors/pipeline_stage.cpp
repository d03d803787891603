// pipeline_stage: the member's training loop as a chain of responses and messages.
#include "actors/pipeline_stage.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "actors/pipeline_layout.hpp"
#include "actors/pipeline_schedule.hpp"
#include "actors/stage_inbox.hpp"
#include "tensor/backend.hpp"
#include "tensor/compute.hpp"
#include "tensor/group_comm.hpp"
#include "tensor/random.hpp"
#include "tensor/sampler.hpp"
#include "tensor/stage_replica.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;
using wall = std::chrono::system_clock;
using connect_retry_atom = caf::atom_constant<caf::atom("reconnect")>;
// A member with nothing to pull, to itself: start the next step.
using next_step_atom = caf::atom_constant<caf::atom("nextstep")>;
// Stage i -> stage i + 1 across nodes, once connected: "I am your previous stage".
using stage_hello_atom = caf::atom_constant<caf::atom("stagehello")>;

struct member_state {
  coordinator_actor coordinator;
  stage_options opts;
  std::shared_ptr<const dataset_split> data;     // the first and the last stage
  std::uint32_t rank = 0, world = 1;             // member id; replicas
  std::uint32_t replica = 0, stage = 0, stages = 1;
  job_spec job;
  std::vector<shard_actor> shards;
  std::vector<std::uint32_t> active;             // shards that hold part of this stage
  std::vector<std::vector<key_range>> ranges;    // per shard: this stage's, stage-local offsets
  std::vector<std::int64_t> slice_numel;         // per shard
  std::vector<std::int64_t> base_version;        // per shard, of the params in use
  caf::actor prev, next;                         // pipeline neighbours (invalid at the ends)
  std::optional<model> net;                      // this stage's layers
  std::unique_ptr<backend_context> backend;      // off the host, or for a local group
  compute exec;                                  // the host, or backend
  // --local-reduce (Note [Local groups] in coordinator.cpp): the group, ascending, [0]
  // leads; its communicator; the id the leader made, once it has arrived.
  std::vector<std::uint32_t> group;
  std::unique_ptr<group_comm> comm;
  std::optional<std::vector<std::uint8_t>> group_id_bytes;
  bool awaiting_group = false;
  std::unique_ptr<stage_replica> rep;            // real compute (declared after exec: destroyed first)
  std::optional<optimizer_state> local_opt;      // --servers 0
  tensor synthetic_grad;                         // --simulate-compute
  tensor xb, yb;                                 // one microbatch of data
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
  std::map<std::string, std::function<void()>> retries;  // pending connects, by peer
  std::function<void()> on_prev_hello;                   // set while waiting for the previous stage
  struct hello { caf::actor sender; std::uint32_t replica, stage; };
  std::optional<hello> early_hello;                      // a hello that came before the welcome
  bool welcomed = false;
  // Until its neighbours are wired (a neighbour may start first and send at once), stage
  // tensors wait here with their senders, and are checked when the stage starts.
  bool wired = false;
  std::vector<std::function<caf::error()>> early;
  lr_schedule schedule;
  // The minibatch in progress: its schedule, where the stage is in it, and the messages
  // that arrived before their action was due, by (step, microbatch).
  bool in_step = false;
  std::int64_t batch = 0;
  int parts = 0;
  std::vector<pipeline_action> actions;
  std::size_t next_action = 0;
  std::vector<int> slot_of;                      // per microbatch
  double step_loss = 0.0, busy = 0.0, forward_s = 0.0, backward_s = 0.0;
  int stored = 0, peak = 0;
  wall::time_point params_ready;                 // the step's parameters arrived
  std::optional<wall::time_point> first_action;  // the step's first forward began
  std::optional<stage_inbox> acts_in, grads_in;
  // Observability: metric handles (if metrics are on), the trace track (if tracing).
  std::optional<monitoring::worker_metrics> m;
  std::optional<monitoring::stage_metrics> sm;
  std::optional<monitoring::device_metrics> dm;  // on a backend
  std::uint32_t track = 0;
  wall::time_point step_begin;
  static inline const char* name = "troupe.pipeline_stage";
};

using stage_pointer = caf::stateful_actor<member_state>*;

bool pipelined(const member_state& st) { return st.stages > 1; }
bool first_stage(const member_state& st) { return st.stage == 0; }
bool last_stage(const member_state& st) { return st.stage + 1 == st.stages; }
bool simulated(const member_state& st) { return st.job.simulate_compute_ms > 0.0; }

// "worker 3" or "stage 1 of replica 0": how logs and errors name a member.
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

bool grouped(const member_state& st) { return !st.group.empty(); }
bool group_leader(const member_state& st) { return grouped(st) && st.group.front() == st.rank; }

// A collective of the local group; a failure (a member died) stops this worker.
template <class F>
bool in_group(stage_pointer self, const char* what, F&& f) {
  try {
    f();
    return true;
  } catch (const backend_error& e) {
    fail(self, make_error(errc::stage_lost, who(self->state) + ": the local group's " + what + " failed: " + e.what()));
    return false;
  }
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
void open_group(stage_pointer self);

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

// Opens this member's communicator: the leader makes the id and sends it through the
// coordinator; the others wait for it (at most --request-timeout). Opening blocks this
// (detached) actor until every member has opened, or fails at the timeout.
void open_group(stage_pointer self) {
  auto& st = self->state;
  if (group_leader(st) && !st.group_id_bytes) {
    try {
      st.group_id_bytes = group_comm::new_id(*st.backend);
    } catch (const backend_error& e) {
      fail(self, make_error(errc::stage_lost, who(st) + ": cannot make its local group's id: " + e.what()));
      return;
    }
    self->send(st.coordinator, group_atom::value, group_id{st.rank, *st.group_id_bytes});
  }
  if (!st.group_id_bytes) {
    if (!st.awaiting_group) {
      st.awaiting_group = true;
      self->delayed_send(self, st.timeout, group_atom::value, group_id{st.rank, {}});
    }
    return;
  }
  st.awaiting_group = false;
  const auto index = std::find(st.group.begin(), st.group.end(), st.rank) - st.group.begin();
  try {
    st.comm = std::make_unique<group_comm>(*st.backend, *st.group_id_bytes, static_cast<int>(st.group.size()),
                                           static_cast<int>(index), st.timeout);
  } catch (const backend_error& e) {
    fail(self, make_error(errc::stage_lost, who(st) + ": its local group did not form: " + e.what()));
    return;
  }
  start_training(self);
}

// Connects to the actor published at host:port, retrying (with a growing pause) until
// `deadline`: a node may still be busy with other handshakes when many start at once.
void connect_peer(stage_pointer self, std::string peer, std::string host, std::uint16_t port,
                  clock_type::time_point deadline, std::function<void(caf::strong_actor_ptr)> on_connected,
                  std::chrono::milliseconds pause = std::chrono::milliseconds(100)) {
  auto& st = self->state;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
  self->request(*st.opts.connector, std::max(left, std::chrono::milliseconds(1)), caf::connect_atom::value, host, port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (!ptr) {
              fail(self, make_error(errc::shard_lost, "nothing is published at " + host + ":" + std::to_string(port) +
                                                          " where " + peer + " should be"));
              return;
            }
            on_connected(std::move(ptr));
          },
          [=](caf::error& e) {
            if (clock_type::now() + pause < deadline) {
              spdlog::warn("{}: {} at {}:{} not reachable yet ({}); retrying", who(self->state), peer, host, port,
                           describe(e));
              self->delayed_send(self, pause, connect_retry_atom::value, peer);
              self->state.retries[peer] = [=] {
                connect_peer(self, peer, host, port, deadline, on_connected, pause * 2);
              };
              return;
            }
            fail(self, make_error(peer.starts_with("shard") ? errc::shard_lost : errc::stage_lost,
                                  "cannot reach " + peer + " at " + host + ":" + std::to_string(port) + ": " +
                                      describe(e)));
          });
}

// A neighbour that dies takes this stage down with it: its pipeline cannot finish a step.
// One that finishes normally has sent everything this stage needs from it.
void watch_neighbour(stage_pointer self, const caf::actor& n) {
  if (n) self->monitor(n);
}

// Wires the previous stage from its hello, once the welcome said who that must be.
void take_hello(stage_pointer self, const caf::actor& sender, std::uint32_t replica, std::uint32_t stage) {
  auto& st = self->state;
  if (!st.on_prev_hello || replica != st.replica || stage + 1 != st.stage) {
    spdlog::warn("{}: ignored a hello from {} claiming stage {} of replica {}", who(st), caf::to_string(sender), stage,
                 replica);
    return;
  }
  st.prev = sender;
  auto done = std::move(st.on_prev_hello);
  st.on_prev_hello = nullptr;
  done();
}

// In a cluster the welcome names each shard's and neighbour's address: connect to every
// one directly (through the node's plain or TLS middleman), then start.
//
// Note [One connection per neighbour pair]
// When two CAF nodes connect to each other at the same moment, BASP keeps one of the two
// connections and drops the other, and the proxies made on the dropped one die with
// remote_link_unreachable: both stages then saw their neighbour "die" at start-up. So only
// the earlier stage connects; it then sends stage_hello, and the later stage takes the
// hello's sender as its previous stage (the one connection carries both directions).
void connect_peers(stage_pointer self, worker_welcome& w) {
  auto& st = self->state;
  const bool direct = st.opts.connector && !w.shard_hosts.empty() && !w.shard_hosts.front().empty();
  const bool neighbours_by_address = st.opts.connector && (!w.prev_host.empty() || !w.next_host.empty());
  if (!direct && !neighbours_by_address) {
    watch_neighbour(self, st.prev);
    watch_neighbour(self, st.next);
    start_training(self);
    return;
  }
  auto pending = std::make_shared<std::size_t>((direct ? st.active.size() : 0) + !w.prev_host.empty() +
                                               !w.next_host.empty());
  auto one_done = [=] {
    if (--*pending > 0) return;
    watch_neighbour(self, self->state.prev);
    watch_neighbour(self, self->state.next);
    start_training(self);
  };
  const auto deadline = clock_type::now() + st.timeout;
  if (direct)
    for (std::uint32_t s : st.active)
      connect_peer(self, "shard " + std::to_string(s), w.shard_hosts[s], w.shard_ports[s], deadline,
                   [=](caf::strong_actor_ptr p) {
                     self->state.shards[s] = caf::actor_cast<shard_actor>(std::move(p));
                     one_done();
                   });
  // Only stage i connects to stage i + 1 (Note [One connection per neighbour pair]); the
  // previous stage is wired by its hello.
  if (!w.prev_host.empty()) {
    st.prev = caf::actor{};
    st.on_prev_hello = one_done;
    if (auto h = std::exchange(st.early_hello, std::nullopt)) take_hello(self, h->sender, h->replica, h->stage);
    if (st.on_prev_hello)
      self->delayed_send(self, st.timeout, stage_hello_atom::value, std::uint32_t{0}, std::uint32_t{0});
  }
  if (!w.next_host.empty())
    connect_peer(self, "stage " + std::to_string(st.stage + 1), w.next_host, w.next_port, deadline,
                 [=](caf::strong_actor_ptr p) {
                   self->state.next = caf::actor_cast<caf::actor>(std::move(p));
                   self->send(self->state.next, stage_hello_atom::value, self->state.replica, self->state.stage);
                   one_done();
                 });
  if (*pending == 0) one_done();
}

// Where this member could share a local group: GPUs of one machine (NCCL), or threads of
// one process (the CPU backend).
std::string locality(device d) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return d.kind == device_kind::cuda ? "cuda@" + std::string(host)
                                     : "cpu@" + std::string(host) + ":" + std::to_string(::getpid());
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
      [=](stage_hello_atom, std::uint32_t replica, std::uint32_t stage) {
        auto& st = self->state;
        auto sender = caf::actor_cast<caf::actor>(self->current_sender());
        if (sender == self) {  // the deadline set in connect_peers
          if (st.on_prev_hello)
            fail(self, make_error(errc::stage_lost, who(st) + " never heard from stage " + std::to_string(st.stage - 1) +
                                                     " within --request-timeout; is that node reachable?"));
          return;
        }
        if (!st.welcomed && !st.early_hello) {
          st.early_hello = member_state::hello{std::move(sender), replica, stage};
          return;
        }
        take_hello(self, sender, replica, stage);
      },
      [=](next_step_atom) {
        auto& st = self->state;
        if (grouped(st) && !in_group(self, "parameter broadcast", [&] { st.rep->share_params(*st.comm, false); }))
          return;
        begin_step(self);
      },
      [=](group_atom, group_id& g) {
        auto& st = self->state;
        if (caf::actor_cast<caf::actor>(self->current_sender()) == self) {  // the deadline set in open_group
          if (st.awaiting_group)
            fail(self, make_error(errc::stage_lost, who(st) + " never received its local group's id from worker " +
                                                     std::to_string(st.group.empty() ? 0 : st.group.front()) +
                                                     " within --request-timeout"));
          return;
        }
        if (st.group_id_bytes || g.id.empty()) return;
        if (caf::actor_cast<caf::actor_addr>(self->current_sender()) != st.coordinator.address()) {
          spdlog::warn("{}: ignored a local group id from {}: only the coordinator relays them", who(st),
                       caf::to_string(self->current_sender()));
          return;
        }
        st.group_id_bytes = std::move(g.id);
        if (st.awaiting_group) open_group(self);
      },
      [=](connect_retry_atom, const std::string& peer) {
        auto it = self->state.retries.find(peer);
        if (it == self->state.retries.end()) return;
        auto retry = std::move(it->second);
        self->state.retries.erase(it);
        retry();
      },
  };
}

}  // namespace

caf::actor spawn_pipeline_stage(caf::actor_system& sys, coordinator_actor coordinator, stage_options opts) {
  return sys.spawn<caf::detached>(stage_actor, std::move(coordinator), std::move(opts));
}

void join_as_member(const caf::actor& member, std::string host, std::uint16_t port) {
  caf::anon_send(member, join_atom::value, std::move(host), port);
}

}  // namespace troupe
