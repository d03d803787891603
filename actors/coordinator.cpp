// coordinator: the coordinator actor's behavior, for every kind of job: it checks who sent
// each message and decodes it into a call of job_core; coordinator_actions.cpp carries out
// what the core returns, coordinator_keys.cpp a key-value job's calls and actions.
#include "actors/coordinator.hpp"

#include <spdlog/spdlog.h>

#include <optional>

#include "actors/coordinator_state.hpp"
#include "monitoring/refusals.hpp"
#include "transport/frame_bound.hpp"

namespace troupe::coordinator_shell {

namespace {

// The member (by rank) or shard (by index) whose actor sent the down message, if any.
void on_down(coord_pointer self, const caf::down_msg& dm) {
  auto& st = self->state;
  const auto now = job_clock::now();
  for (std::uint32_t s = 0; s < st.shards.size(); ++s)
    if (dm.source == st.shards[s].address())
      return drive(self, [&](job_core& c) { return c.on_shard_down(s, caf::to_string(dm.reason)); });
  for (std::uint32_t r = 0; r < st.members.size(); ++r)
    if (st.members[r] && dm.source == st.members[r].address())
      return drive(self,
                   [&](job_core& c) { return c.on_member_down(r, as_fault(dm.reason), describe(dm.reason), now); });
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

}  // namespace

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

namespace {

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

// A join waits while the coordinator restarts in place (Note [Restarting in place]); the
// core decides it with the ticket its answer is kept under.
caf::result<shard_welcome> on_shard_join(coord_pointer self, const shard_join& j) {
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
}

caf::result<worker_welcome> on_member_join(coord_pointer self, const worker_join& j) {
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
}

// Whether the sender writes checkpoint file `index`: shard `index`, or with no shard
// servers stage `index` of replica 0 (Note [Members' checkpoints] in
// core/member_checkpoint.cpp); anyone else is refused and counted.
bool from_checkpoint_writer(coord_pointer self, std::uint32_t index) {
  if (self->state.core->job().servers == 0) return from_member(self, index, "a checkpoint report");
  const auto& shards = self->state.shards;
  const auto& sender = self->current_sender();
  if (index < shards.size() && sender && shards[index].address() == sender->address()) return true;
  note_refused(self, "a checkpoint report");
  return false;
}

// The shell's state and the first core (resumed from a checkpoint when one is given), the
// evaluator (a training job with real compute), the watch on every node and the watchdog.
void set_up(coord_pointer self, job_spec job, const model& m, std::shared_ptr<const dataset_split> data,
            job_callbacks cb, observability obs, join_gate gate, std::optional<resume_point> resume) {
  auto& st = self->state;
  st.cb = std::move(cb);
  st.gate = std::move(gate);
  if (job.simulate_compute_ms <= 0.0 && !job.kv) st.evaluator = spawn_evaluator(self->system(), m, std::move(data));
  st.job = job;
  st.layout = m;
  st.obs = obs;
  st.core = std::make_unique<job_core>(std::move(job), m, std::move(obs), job_clock::now());
  if (const auto bytes = st.core->frame_bytes()) set_frame_bound(bytes);
  if (resume) st.core->resume_from(*resume);
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  self->delayed_send(self, job_core::watch_interval, watchdog_tick{});
}

local_coordinator_actor::behavior_type coordinator(coord_pointer self, job_spec job, model m,
                                                   std::shared_ptr<const dataset_split> data, job_callbacks cb,
                                                   observability obs, join_gate gate,
                                                   std::optional<resume_point> resume) {
  set_up(self, std::move(job), m, std::move(data), std::move(cb), std::move(obs), std::move(gate), std::move(resume));
  return {
      [=](join_atom, const shard_join& j) -> caf::result<shard_welcome> {
        if (!proven(self, "server", j.proof)) return make_error(errc::not_member, "refused");
        return on_shard_join(self, j);
      },
      [=](join_atom, const worker_join& j) -> caf::result<worker_welcome> {
        if (!proven(self, "worker", j.proof)) return make_error(errc::not_member, "refused");
        return on_member_join(self, j);
      },
      [=](group_atom, const group_id& g) {
        auto sender = rank_of(self, self->current_sender());
        if (!sender) return note_refused(self, "a local group id");
        drive(self, [&](job_core& c) { return c.on_group_id(*sender, g); });
      },
      [=](checkpoint_atom, const checkpoint_saved& s) {
        if (from_checkpoint_writer(self, s.shard)) drive(self, [&](job_core& c) { return c.on_checkpoint_saved(s); });
      },
      [=](checkpoint_atom, const checkpoint_begun& b) {
        if (from_checkpoint_writer(self, b.shard)) drive(self, [&](job_core& c) { return c.on_checkpoint_begun(b); });
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
      // A key-value job's members' calls (coordinator_keys.cpp).
      [=](kv_init_atom, const kv_init& r) { return on_key_call(self, r); },
      [=](kv_lookup_atom, const kv_lookup& r) { return on_key_call(self, r); },
      [=](kv_opt_atom, const kv_set_optimizer& r) { return on_key_call(self, r); },
      [=](kv_barrier_atom, const kv_barrier& r) { return on_key_call(self, r); },
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
      [=](replacement_found& r) { on_replacement_found(self, r); },
  };
}

}  // namespace

}  // namespace troupe::coordinator_shell

namespace troupe {

local_coordinator_actor spawn_coordinator(caf::actor_system& sys, job_spec job, const model& m,
                                          std::shared_ptr<const dataset_split> data, job_callbacks cb,
                                          observability obs, join_gate gate, std::optional<resume_point> resume) {
  return sys.spawn(coordinator_shell::coordinator, std::move(job), m, std::move(data), std::move(cb), std::move(obs),
                   std::move(gate), std::move(resume));
}

}  // namespace troupe
