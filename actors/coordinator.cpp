// coordinator: decodes messages for job_core and carries out its actions.
#include "actors/coordinator.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <variant>

#include "actors/coordinator_state.hpp"
#include "actors/thread_mail.hpp"
#include "core/checkpoint_store.hpp"
#include "core/job_checkpoint.hpp"
#include "core/ring_seats.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::coordinator_shell {

namespace {

std::chrono::milliseconds request_timeout(coord_pointer self) {
  return std::chrono::milliseconds(self->state.core->job().request_timeout_ms);
}

// A handler for a failed request to a shard or the evaluator: the job ends with `code`.
// One for a core that has been replaced since is dropped (Note [Restarting in place]).
auto failing(coord_pointer self, errc code, std::string what) {
  return [=, gen = self->state.generation](caf::error& e) {
    drive_answer(self, gen, [&](job_core& c) { return c.fail({code, what + ": " + describe(e)}); });
  };
}

// Calls `done` once every shard acknowledged `request` (right away with no shards).
template <class Request>
void ask_every_shard(coord_pointer self, Request request, std::function<void()> done, errc code, std::string what) {
  auto acks = std::make_shared<std::size_t>(self->state.shards.size());
  if (*acks == 0) done();
  for (auto& shard : self->state.shards)
    request(shard).then(
        [=](caf::ok_atom) {
          if (--*acks == 0) done();
        },
        failing(self, code, what));
}

// The actor that holds `rank` (empty before it is assigned).
member_identity identity_of_rank(coord_pointer self, std::uint32_t rank) {
  const auto& members = self->state.members;
  if (rank >= members.size()) return {};
  return identity_of(caf::actor_cast<caf::strong_actor_ptr>(members[rank]));
}

worker_welcome welcome_for(coord_pointer self, member_assignment a) {
  const auto& st = self->state;
  worker_welcome w;
  const bool shards_by_handle = a.shard_hosts.empty() || a.shard_hosts.front().empty();
  if (shards_by_handle) w.shards = st.shards;
  const std::uint32_t k = a.job.pipeline_stages, stage = a.rank % k;
  if (stage > 0) {
    w.prev_identity = identity_of_rank(self, a.rank - 1);
    if (a.prev_host.empty()) w.prev = st.members[a.rank - 1];
  }
  if (stage + 1 < k && a.next_host.empty()) w.next = st.members[a.rank + 1];
  if (const auto seat = seat_in(a.ring, a.rank / k)) {  // --mode allreduce (Note [Rings of leaders])
    const std::uint32_t prev = seat->prev * k + stage, next = seat->next * k + stage;
    w.ring_prev_identity = identity_of_rank(self, prev);
    w.ring_next_identity = identity_of_rank(self, next);
    if (a.ring_next_host.empty()) {
      w.ring_prev = st.members[prev];
      w.ring_next = st.members[next];
    }
  }
  w.place = std::move(a);
  return w;
}

void gather(coord_pointer self, std::uint64_t id, bool with_params) {
  for (std::uint32_t s = 0; s < self->state.shards.size(); ++s) {
    const auto& shard = self->state.shards[s];
    self->request(shard, request_timeout(self), stats_atom::value)
        .then([=, gen = self->state.generation](const shard_stats& x) {
          drive_answer(self, gen, [&](job_core& c) { return c.on_stats(id, x); });
        },
              failing(self, errc::shard_lost, "a shard did not answer"));
    if (with_params)
      self->request(shard, request_timeout(self), snapshot_atom::value)
          .then([=, gen = self->state.generation](const params_reply& r) {
            drive_answer(self, gen, [&](job_core& c) { return c.on_snapshot(id, s, r); });
          },
                failing(self, errc::shard_lost, "a shard did not answer"));
  }
}

// Completes a checkpoint whose shards' files are written (a small file and a manifest)
// on the committer's thread, which tells the core how it went. Commits run in order, one
// at a time; the core waits for the last one before the job's result.
void commit(coord_pointer self, const job_actions::commit_checkpoint& c) {
  auto& st = self->state;
  if (!st.committer) st.committer = std::make_unique<serial_worker>(std::numeric_limits<std::size_t>::max());
  const auto& core = *st.core;
  const checkpoint_store store(core.job().checkpoints.dir, core.job().checkpoints.keep);
  auto tell = thread_mail(caf::actor_cast<caf::actor_addr>(self));
  st.committer->post([=, job = core.job(), params = core.num_params()] {
    const auto t0 = std::chrono::steady_clock::now();
    auto error = commit_job_checkpoint(store, job, params, c.step, c.shards);
    if (!error)
      spdlog::info("coordinator: checkpoint {} complete in {} ({:.1f} ms to commit)", c.step, job.checkpoints.dir,
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    tell(checkpoint_committed{c.step, std::move(error)});
  });
}

}  // namespace

void finish(coord_pointer self, std::variant<job_result, fault>& outcome) {
  auto& st = self->state;
  const caf::error reason = answer_runs(st.runs, outcome);
  const caf::error ended = make_error(errc::cluster_full, "the job ended before this node was admitted");
  for (auto& [t, j] : st.member_joins) j.promise.deliver(ended);
  for (auto& [t, j] : st.shard_joins) j.promise.deliver(ended);
  for (auto& m : st.members)
    if (m) self->send_exit(m, reason);
  for (auto& s : st.shards) self->send_exit(s, reason);
  if (st.evaluator) self->send_exit(st.evaluator, caf::exit_reason::user_shutdown);
  self->quit(reason);
}

void carry_out(coord_pointer self, job_actions_list actions) {
  auto& st = self->state;
  for (auto& action : actions) {
    std::visit(
        [&](auto& a) {
          using A = std::decay_t<decltype(a)>;
          using namespace job_actions;
          if constexpr (std::is_same_v<A, welcome_shard>) {
            auto j = st.shard_joins.extract(a.t);
            st.shards.push_back(j.mapped().handle);
            self->monitor(j.mapped().handle);
            j.mapped().promise.deliver(std::move(a.welcome));
          } else if constexpr (std::is_same_v<A, welcome_member>) {
            auto j = st.member_joins.extract(a.t);
            j.mapped().promise.deliver(welcome_for(self, std::move(a.assignment)));
          } else if constexpr (std::is_same_v<A, refuse>) {
            if (auto j = st.member_joins.extract(a.t)) {
              self->demonitor(j.mapped().handle.address());
              j.mapped().promise.deliver(make_error(a.why));
            } else if (auto s = st.shard_joins.extract(a.t)) {
              s.mapped().promise.deliver(make_error(a.why));
            }
          } else if constexpr (std::is_same_v<A, assign_rank>) {
            if (st.members.size() <= a.rank) st.members.resize(a.rank + 1);
            st.members[a.rank] = st.member_joins.at(a.t).handle;
          } else if constexpr (std::is_same_v<A, start_shards>) {
            shard_start start{a.members, {}};
            for (std::uint32_t rank : a.members.workers)
              start.identities.push_back(identity_of_rank(self, rank));
            ask_every_shard(
                self, [&](const shard_actor& s) { return self->request(s, request_timeout(self), start_atom::value, start); },
                [=, gen = st.generation] {
                  drive_answer(self, gen, [&](job_core& c) { return c.shards_started(job_clock::now()); });
                },
                errc::shard_lost,
                "a shard did not start");
          } else if constexpr (std::is_same_v<A, add_to_shards>) {
            const shard_admit m{{a.rank, a.clock}, identity_of_rank(self, a.rank)};
            const std::uint32_t rank = a.rank;
            ask_every_shard(
                self, [&](const shard_actor& s) { return self->request(s, request_timeout(self), join_atom::value, m); },
                [=, gen = st.generation] {
                  drive_answer(self, gen, [&](job_core& c) { return c.member_added(rank, job_clock::now()); });
                },
                errc::shard_lost,
                "a shard did not admit the rejoining worker");
          } else if constexpr (std::is_same_v<A, remove_from_shards>) {
            for (auto& s : st.shards) self->send(s, left_atom::value, a.rank);
          } else if constexpr (std::is_same_v<A, name_straggler>) {
            for (auto& s : st.shards) self->send(s, straggler_atom::value, a.rank, a.slow);
          } else if constexpr (std::is_same_v<A, grant_rows>) {
            // Sent as the coordinator: a member takes grants from nobody else.
            if (a.rank < st.members.size() && st.members[a.rank])
              caf::unsafe_send_as(self, st.members[a.rank], rows_atom::value, std::move(a.grant));
          } else if constexpr (std::is_same_v<A, shed_rows>) {
            if (a.rank < st.members.size() && st.members[a.rank])
              caf::unsafe_send_as(self, st.members[a.rank], rows_atom::value, a.shed);
          } else if constexpr (std::is_same_v<A, job_actions::gather>) {
            gather(self, a.id, a.with_params);
          } else if constexpr (std::is_same_v<A, evaluate>) {
            self->request(st.evaluator, request_timeout(self), eval_atom::value, eval_request{a.epoch, std::move(a.params)})
                .then([=, gen = st.generation](const eval_reply& r) {
                  drive_answer(self, gen, [&](job_core& c) { return c.on_evaluated(r); });
                },
                      failing(self, errc::bad_job, "evaluation failed"));
          } else if constexpr (std::is_same_v<A, relay_group_id>) {
            // Sent as the coordinator, so a member can tell the relay from a stranger's id.
            for (std::uint32_t r : a.to) caf::unsafe_send_as(self, st.members[r], group_atom::value, a.id);
          } else if constexpr (std::is_same_v<A, epoch_closed>) {
            if (st.cb.on_epoch) st.cb.on_epoch(a.summary);
          } else if constexpr (std::is_same_v<A, note>) {
            spdlog::warn("coordinator: {}", a.text);
            if (st.cb.on_event) st.cb.on_event(a.text);
          } else if constexpr (std::is_same_v<A, request_checkpoint>) {
            for (auto& s : st.shards) self->send(s, checkpoint_atom::value, a.step);
            // Sent as the coordinator, the only sender a member takes this from.
            for (std::uint32_t r : a.members)
              if (r < st.members.size() && st.members[r])
                caf::unsafe_send_as(self, st.members[r], checkpoint_atom::value, a.step);
          } else if constexpr (std::is_same_v<A, commit_checkpoint>) {
            commit(self, a);
          } else if constexpr (std::is_same_v<A, record_loss>) {
            // Before the first checkpoint the directory may not exist: nothing to resume.
            const std::string& dir = st.core->job().checkpoints.dir;
            std::error_code ec;
            if (!std::filesystem::is_directory(dir, ec)) return;
            if (auto why = write_loss_record(dir, a.record))
              spdlog::warn("coordinator: {}; a run resumed from {} will not know how many steps it repeats", *why, dir);
          } else if constexpr (std::is_same_v<A, job_actions::restart>) {
            restart_in_place(self, a.why);
          } else if constexpr (std::is_same_v<A, job_actions::finish>) {
            finish(self, a.outcome);
          }
        },
        action);
    // The actor has quit, or its core is finished and the next is on its way.
    if (std::holds_alternative<job_actions::finish>(action) || std::holds_alternative<job_actions::restart>(action)) return;
  }
}

namespace {

// The member (by rank) or shard (by index) whose actor sent the down message, if any.
void on_down(coord_pointer self, const caf::down_msg& dm) {
  auto& st = self->state;
  const auto now = job_clock::now();
  for (std::uint32_t s = 0; s < st.shards.size(); ++s)
    if (dm.source == st.shards[s].address()) return drive(self, [&](job_core& c) { return c.on_shard_down(s, caf::to_string(dm.reason)); });
  for (std::uint32_t r = 0; r < st.members.size(); ++r)
    if (st.members[r] && dm.source == st.members[r].address())
      return drive(self, [&](job_core& c) { return c.on_member_down(r, as_fault(dm.reason), describe(dm.reason), now); });
  for (auto it = st.member_joins.begin(); it != st.member_joins.end(); ++it)
    if (dm.source == it->second.handle.address()) {  // one that stood by
      st.core->on_standby_down(it->first);
      st.member_joins.erase(it);
      return;
    }
}

std::optional<std::uint32_t> rank_of(coord_pointer self, const caf::strong_actor_ptr& sender) {
  const auto& members = self->state.members;
  const auto addr = caf::actor_cast<caf::actor_addr>(sender);
  for (std::uint32_t r = 0; r < members.size(); ++r)
    if (members[r] && members[r].address() == addr) return r;
  return std::nullopt;
}

// Counts and (once per peer) logs a member's report from an actor that does not hold
// the rank it names (Note [Members are identities]).
void note_refused(coord_pointer self, const char* what) {
  const std::string peer = caf::to_string(self->current_sender());
  if (monitoring::count_refusal(monitoring::refusal::not_a_member, peer))
    spdlog::warn("coordinator: refused {} from {}, which does not hold the rank it names", what, peer);
}

bool from_member(coord_pointer self, std::uint32_t rank, const char* what) {
  const auto& members = self->state.members;
  const auto& sender = self->current_sender();
  if (rank < members.size() && members[rank] && sender && members[rank].address() == sender->address()) return true;
  note_refused(self, what);
  return false;
}

// A join the gate refuses (no proof of the job's secret, or a certificate of another
// role): counted, logged once per node, and refused before the node learns anything about
// the job.
bool proven(coord_pointer self, const char* role, const std::string& proof) {
  auto& gate = self->state.gate;
  if (!gate) return true;
  const auto& sender = self->current_sender();
  const std::string node = sender ? caf::to_string(sender->node()) : std::string();
  const auto refusal = gate(role, proof, node);
  if (!refusal) return true;
  if (monitoring::count_refusal(refusal->why, node))
    spdlog::warn("coordinator: refused a {} join from node {} {}", role, node, refusal->reason);
  return false;
}

local_coordinator_actor::behavior_type coordinator(coord_pointer self, job_spec job, model m,
                                                   std::shared_ptr<const dataset_split> data, job_callbacks cb,
                                                   observability obs, join_gate gate,
                                                   std::optional<resume_point> resume) {
  auto& st = self->state;
  st.cb = std::move(cb);
  st.gate = std::move(gate);
  if (job.simulate_compute_ms <= 0.0) st.evaluator = spawn_evaluator(self->system(), m, std::move(data));
  st.job = job;
  st.layout = m;
  st.obs = obs;
  st.core = std::make_unique<job_core>(std::move(job), m, std::move(obs), job_clock::now());
  if (resume) st.core->resume_from(*resume);
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  self->delayed_send(self, job_core::watch_interval, watchdog_tick{});
  return {
      [=](join_atom, const shard_join& j) -> caf::result<shard_welcome> {
        if (!proven(self, "server", j.proof)) return make_error(errc::not_member, "refused");
        const ticket t = self->state.next_ticket++;
        auto handle = caf::actor_cast<shard_actor>(self->current_sender());  // (the promise takes the sender)
        auto promise = self->make_response_promise<shard_welcome>();
        self->state.shard_joins[t] = {promise, handle};
        auto join = [=] { drive(self, [&](job_core& c) { return c.on_shard_join(t, j, job_clock::now()); }); };
        if (!hold_join(self, [=] {
              if (self->state.shard_joins.count(t) > 0) join();
            }))
          join();
        return promise;
      },
      [=](join_atom, const worker_join& j) -> caf::result<worker_welcome> {
        if (!proven(self, "worker", j.proof)) return make_error(errc::not_member, "refused");
        const ticket t = self->state.next_ticket++;
        auto handle = caf::actor_cast<stage_actor>(self->current_sender());  // (the promise takes the sender)
        auto promise = self->make_response_promise<worker_welcome>();
        self->monitor(handle);
        self->state.member_joins[t] = {promise, handle};
        auto join = [=] { drive(self, [&](job_core& c) { return c.on_member_join(t, j, job_clock::now()); }); };
        if (!hold_join(self, [=] {
              if (self->state.member_joins.count(t) > 0) join();  // not gone meanwhile
            }))
          join();
        return promise;
      },
      [=](group_atom, const group_id& g) {
        auto sender = rank_of(self, self->current_sender());
        if (!sender) return note_refused(self, "a local group id");
        drive(self, [&](job_core& c) { return c.on_group_id(*sender, g); });
      },
      [=](checkpoint_atom, const checkpoint_saved& s) {
        const auto& shards = self->state.shards;
        const auto& sender = self->current_sender();
        // With no shard servers, stage i of replica 0 (rank i) writes file i (Note
        // [Members' checkpoints] in core/member_checkpoint.cpp).
        if (self->state.core->job().servers == 0) {
          if (!from_member(self, s.shard, "a checkpoint report")) return;
        } else if (s.shard >= shards.size() || !sender || shards[s.shard].address() != sender->address()) {
          return note_refused(self, "a checkpoint report");
        }
        drive(self, [&](job_core& c) { return c.on_checkpoint_saved(s); });
      },
      [=](const checkpoint_committed& c) {
        drive(self, [&](job_core& core) { return core.on_checkpoint_committed(c.step, c.error); });
      },
      [=](progress_atom, const step_report& r) {
        if (!from_member(self, r.rank, "a step report")) return;
        drive(self, [&](job_core& c) { return c.on_step(r, job_clock::now()); });
      },
      [=](epoch_atom, const worker_epoch& r) {
        if (!from_member(self, r.rank, "an epoch report")) return;
        drive(self, [&](job_core& c) { return c.on_epoch(r, job_clock::now()); });
      },
      [=](done_atom, const worker_done& r) {
        if (!from_member(self, r.rank, "a done report")) return;
        drive(self, [&](job_core& c) { return c.on_done(r, job_clock::now()); });
      },
      [=](rows_atom, const rows_answer& a) {
        if (!from_member(self, a.rank, "an answer to a grant of rows")) return;
        drive(self, [&](job_core& c) { return c.on_rows_answer(a); });
      },
      [=](kv_init_atom, const kv_init&) -> caf::result<kv_key_layout> { return not_a_kv_job(); },
      [=](kv_lookup_atom, const kv_lookup&) -> caf::result<kv_key_layout> { return not_a_kv_job(); },
      [=](kv_opt_atom, const kv_set_optimizer&) -> caf::result<caf::ok_atom> { return not_a_kv_job(); },
      [=](kv_barrier_atom, const kv_barrier&) -> caf::result<caf::ok_atom> { return not_a_kv_job(); },
      [=](run_request) -> caf::result<job_result> {
        auto promise = self->make_response_promise<job_result>();
        self->state.runs.push_back(promise);
        return promise;
      },
      [=](watchdog_tick) {
        drive(self, [&](job_core& c) { return c.on_tick(job_clock::now()); });
        const job_phase p = self->state.core->phase();
        if (p != job_phase::finished || self->state.restarting)
          self->delayed_send(self, job_core::watch_interval, watchdog_tick{});
      },
      [=](restart_ready& r) { on_restart_ready(self, r); },
  };
}

}  // namespace

}  // namespace troupe::coordinator_shell

namespace troupe {

local_coordinator_actor spawn_coordinator(caf::actor_system& sys, job_spec job, const model& m,
                                          std::shared_ptr<const dataset_split> data, job_callbacks cb,
                                          observability obs, join_gate gate, std::optional<resume_point> resume) {
  return sys.spawn(coordinator_shell::coordinator, std::move(job), m, std::move(data), std::move(cb), std::move(obs), std::move(gate),
                   std::move(resume));
}

}  // namespace troupe
