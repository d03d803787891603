// coordinator_actions: the coordinator's shell carrying out what job_core returns: the
// welcomes (with the handles and identities a member needs), refusals, requests to the
// shards and the evaluator whose answers go back to the core, relays, checkpoint commits
// on the committer's thread, a restart in place, and the job's end.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <limits>
#include <variant>

#include "actors/coordinator_state.hpp"
#include "actors/thread_mail.hpp"
#include "core/checkpoint_store.hpp"
#include "core/job_checkpoint.hpp"
#include "core/ring_seats.hpp"

namespace troupe::coordinator_shell {

namespace {

// Calls `done` once every shard acknowledged `request` (right away with no shards).
template <class Request>
void ask_every_shard(coord_pointer self, Request request, std::function<void()> done, errc code, std::string what) {
  ask_all(
      self, self->state.shards.size(), [=](std::size_t s) { return request(self->state.shards[s]); }, std::move(done),
      code, std::move(what));
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
        .then([=, gen = self->state.generation](
                  const shard_stats& x) { drive_answer(self, gen, [&](job_core& c) { return c.on_stats(id, x); }); },
              failing(self, errc::shard_lost, "a shard did not answer"));
    if (with_params)
      self->request(shard, request_timeout(self), snapshot_atom::value)
          .then(
              [=, gen = self->state.generation](const params_reply& r) {
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
    auto error = commit_job_checkpoint(store, job, params, c.step, c.shards, c.keys);
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
  end_key_calls(self,
                std::holds_alternative<fault>(outcome) ? reason : make_error(errc::cluster_full, "the job has ended"));
  for (auto& m : st.members)
    if (m) self->send_exit(m, reason);
  for (auto& s : st.shards) self->send_exit(s, reason);
  if (st.evaluator) self->send_exit(st.evaluator, caf::exit_reason::user_shutdown);
  self->quit(reason);
}

namespace {

// One action of the core, carried out (one function each; a key-value job's are in
// coordinator_keys.cpp).
void carry(coord_pointer self, job_actions::welcome_shard& a) {
  auto& st = self->state;
  auto j = st.shard_joins.extract(a.t);
  if (a.welcome.index < st.shards.size())  // in place of a lost one (Note [Replacing a key-value shard])
    st.shards[a.welcome.index] = j.mapped().handle;
  else
    st.shards.push_back(j.mapped().handle);
  self->monitor(j.mapped().handle);
  j.mapped().promise.deliver(std::move(a.welcome));
}

void carry(coord_pointer self, job_actions::welcome_member& a) {
  auto& st = self->state;
  auto j = st.member_joins.extract(a.t);
  j.mapped().promise.deliver(welcome_for(self, std::move(a.assignment)));
}

void carry(coord_pointer self, job_actions::refuse& a) {
  auto& st = self->state;
  if (auto j = st.member_joins.extract(a.t)) {
    self->demonitor(j.mapped().handle.address());
    j.mapped().promise.deliver(make_error(a.why));
  } else if (auto s = st.shard_joins.extract(a.t)) {
    s.mapped().promise.deliver(make_error(a.why));
  } else {
    refuse_key_call(self, a.t, a.why);
  }
}

void carry(coord_pointer self, job_actions::assign_rank& a) {
  auto& st = self->state;
  if (st.members.size() <= a.rank) st.members.resize(a.rank + 1);
  st.members[a.rank] = st.member_joins.at(a.t).handle;
}

void carry(coord_pointer self, job_actions::start_shards& a) {
  auto& st = self->state;
  shard_start start{a.members, {}};
  for (std::uint32_t rank : a.members.workers) start.identities.push_back(identity_of_rank(self, rank));
  ask_every_shard(
      self, [&](const shard_actor& s) { return self->request(s, request_timeout(self), start_atom::value, start); },
      [=, gen = st.generation] {
        drive_answer(self, gen, [&](job_core& c) { return c.shards_started(job_clock::now()); });
      },
      errc::shard_lost, "a shard did not start");
}

void carry(coord_pointer self, job_actions::add_to_shards& a) {
  auto& st = self->state;
  const shard_admit m{{a.rank, a.clock}, identity_of_rank(self, a.rank)};
  const std::uint32_t rank = a.rank;
  ask_every_shard(
      self, [&](const shard_actor& s) { return self->request(s, request_timeout(self), join_atom::value, m); },
      [=, gen = st.generation] {
        drive_answer(self, gen, [&](job_core& c) { return c.member_added(rank, job_clock::now()); });
      },
      errc::shard_lost, "a shard did not admit the rejoining worker");
}

void carry(coord_pointer self, job_actions::remove_from_shards& a) {
  auto& st = self->state;
  for (auto& s : st.shards) self->send(s, left_atom::value, a.rank);
}

void carry(coord_pointer self, job_actions::name_straggler& a) {
  auto& st = self->state;
  for (auto& s : st.shards) self->send(s, straggler_atom::value, a.rank, a.slow);
}

void carry(coord_pointer self, job_actions::grant_rows& a) {
  auto& st = self->state;
  // Sent as the coordinator: a member takes grants from nobody else.
  if (a.rank < st.members.size() && st.members[a.rank])
    caf::unsafe_send_as(self, st.members[a.rank], rows_atom::value, std::move(a.grant));
}

void carry(coord_pointer self, job_actions::shed_rows& a) {
  auto& st = self->state;
  if (a.rank < st.members.size() && st.members[a.rank])
    caf::unsafe_send_as(self, st.members[a.rank], rows_atom::value, a.shed);
}

void carry(coord_pointer self, job_actions::gather& a) { gather(self, a.id, a.with_params); }

void carry(coord_pointer self, job_actions::evaluate& a) {
  auto& st = self->state;
  self->request(st.evaluator, request_timeout(self), eval_atom::value, eval_request{a.epoch, std::move(a.params)})
      .then([=, gen = st.generation](
                const eval_reply& r) { drive_answer(self, gen, [&](job_core& c) { return c.on_evaluated(r); }); },
            failing(self, errc::bad_job, "evaluation failed"));
}

void carry(coord_pointer self, job_actions::relay_group_id& a) {
  auto& st = self->state;
  // Sent as the coordinator, so a member can tell the relay from a stranger's id.
  for (std::uint32_t r : a.to) caf::unsafe_send_as(self, st.members[r], group_atom::value, a.id);
}

void carry(coord_pointer self, job_actions::epoch_closed& a) {
  auto& st = self->state;
  if (st.cb.on_epoch) st.cb.on_epoch(a.summary);
}

void carry(coord_pointer self, job_actions::note& a) {
  auto& st = self->state;
  spdlog::warn("coordinator: {}", a.text);
  if (st.cb.on_event) st.cb.on_event(a.text);
}

void carry(coord_pointer self, job_actions::request_checkpoint& a) {
  auto& st = self->state;
  for (auto& s : st.shards) self->send(s, checkpoint_atom::value, a.step);
  // Sent as the coordinator, the only sender a member takes this from.
  for (std::uint32_t r : a.members)
    if (r < st.members.size() && st.members[r])
      caf::unsafe_send_as(self, st.members[r], checkpoint_atom::value, a.step);
}

void carry(coord_pointer self, job_actions::commit_checkpoint& a) { commit(self, a); }

void carry(coord_pointer self, job_actions::record_loss& a) {
  auto& st = self->state;
  // Before the first checkpoint the directory may not exist: nothing to resume.
  const std::string& dir = st.core->job().checkpoints.dir;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;
  if (auto why = write_loss_record(dir, a.record))
    spdlog::warn("coordinator: {}; a run resumed from {} will not know how many steps it repeats", *why, dir);
}

void carry(coord_pointer self, job_actions::restart& a) { restart_in_place(self, a.why, a.finished); }

void carry(coord_pointer self, job_actions::finish& a) { finish(self, a.outcome); }

}  // namespace

void carry_out(coord_pointer self, job_actions_list actions) {
  for (auto& action : actions) {
    std::visit([&](auto& a) { carry(self, a); }, action);
    // The actor has quit, or its core is finished and the next is on its way.
    if (std::holds_alternative<job_actions::finish>(action) || std::holds_alternative<job_actions::restart>(action))
      return;
  }
}

}  // namespace troupe::coordinator_shell
