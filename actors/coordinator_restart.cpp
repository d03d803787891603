// coordinator_restart: the coordinator's side of restarting a job in place after it lost
// a shard server (Note [Restarting in place]), and of a key-value job's replacement of a
// lost shard while its members go on (Note [Replacing a key-value shard] in
// core/job_shard_replacement.cpp).
#include <spdlog/spdlog.h>

#include <limits>

#include "actors/coordinator_state.hpp"
#include "actors/thread_mail.hpp"
#include "core/checkpoint_store.hpp"
#include "core/job_checkpoint.hpp"
#include "core/loss_record.hpp"
#include "transport/frame_bound.hpp"

namespace troupe::coordinator_shell {

// Note [Restarting in place]
// A job with --on-shard-loss recover (the default with --checkpoint-dir) that loses a
// shard server does not end: it restarts from its newest complete checkpoint inside the
// processes that are still there, as a rendezvous of torchrun's elastic agent does, with
// the coordinator staying up. The core records the loss (Note [Steps replayed]) and
// returns `restart` in place of its finish. The shell then
//   - stops every member and shard with the error `restarting`; their nodes join again,
//     with the same flags (Note [Joining again] in net/node.cpp), and a member that saw
//     the shard go first waits for this, parked (Note [Parked members] in
//     actors/stage_parking.cpp);
//   - refuses the joins waiting for an answer with `restarting` too, so they join again;
//   - finds the newest complete checkpoint on the committer's thread, after any commit
//     under way (none: the job starts from its beginning), and consumes the loss record;
//   - makes the next core from the same job and model, resumed from it, and hands it
//     the joins that came meanwhile.
// The next core admits shards and members as the first did. The lost shard's place is
// taken by whichever server joins: `launch` starts the dead process again, an operator
// runs the same `troupe node --role server --join ...` again (or a supervisor does). A
// replacement that never comes is the next core's stall (--stall-timeout), whose error
// says who has joined. Every shard restores its slice from the checkpoint, so in sync
// the run ends bitwise as one that lost nothing on the same workers, as a restart by
// --resume does; the steps since the checkpoint are repeated and counted in
// steps_replayed. Rolling back only the lost shard's slice would keep the others'
// progress, but mixes parameter versions from two steps and breaks that equality; a
// restart costs the steps since the last checkpoint, which --checkpoint-seconds bounds.
// The coordinator's own loss is the one this cannot handle: launch starts it again with
// --resume, and the nodes that waited for it join it (Note [Joining again] in
// net/node.cpp).
void restart_in_place(coord_pointer self, const fault& why, const std::vector<std::uint32_t>& finished) {
  auto& st = self->state;
  const std::string dir = st.job.checkpoints.dir;
  ++st.restarts;
  ++st.generation;
  st.restarting = true;
  const std::string text = to_string(why) + "; the job restarts in place from its newest checkpoint in " + dir +
                           " once a shard server has joined in its place (restart " + std::to_string(st.restarts) + ")";
  spdlog::warn("coordinator: {}", text);
  if (st.cb.on_event) st.cb.on_event(text);
  const caf::error reason =
      make_error(errc::restarting, to_string(why) + "; join the job again: it restarts from its newest checkpoint");
  for (auto& m : st.members)
    if (m) {
      self->demonitor(m.address());
      self->send_exit(m, reason);
    }
  for (auto& s : st.shards) {
    self->demonitor(s.address());
    self->send_exit(s, reason);
  }
  for (auto& [t, j] : st.member_joins) {
    self->demonitor(j.handle.address());
    j.promise.deliver(reason);
  }
  for (auto& [t, j] : st.shard_joins) j.promise.deliver(reason);
  end_key_calls(self, reason);
  st.members.clear();
  st.shards.clear();
  st.member_joins.clear();
  st.shard_joins.clear();
  if (!st.committer) st.committer = std::make_unique<serial_worker>(std::numeric_limits<std::size_t>::max());
  auto tell = thread_mail(caf::actor_cast<caf::actor_addr>(self));
  std::string who;  // "worker 1", "workers 0, 1"
  for (std::uint32_t r : finished) who += (who.empty() ? "" : ", ") + std::to_string(r);
  if (!finished.empty()) who = (finished.size() == 1 ? "worker " : "workers ") + who;
  st.committer->post([tell, dir, job = st.job, params = st.core->num_params(), who, lost = why.detail] {
    restart_ready r;
    // Note [A shard lost after training] (core/job_epochs.cpp): only the end checkpoint
    // needs no member that has finished to train again.
    const bool training_over = !who.empty();
    const auto unfinished = [&](std::optional<std::int64_t> newest) {
      const std::string then = lost + " after " + who + " had finished, before the job's end checkpoint was complete";
      const std::string stop = ": a worker that has finished does not join again to train the steps after it, so the job "
                               "stops; ";
      r.error = fault{errc::shard_lost,
                      newest ? then + " (the newest is " + std::to_string(*newest) + ")" + stop + "go on with --resume " +
                                   dir + " (launch does, starting every process again)"
                             : then + " (none is)" + stop + "run it again"};
      tell(std::move(r));
    };
    if (checkpoint_store(dir, 1).complete().empty()) {
      if (training_over) return unfinished(std::nullopt);
      spdlog::warn("coordinator: {} holds no complete checkpoint yet; the job starts again from its beginning", dir);
      if (auto why = forget_loss_record(dir)) spdlog::warn("coordinator: {}", *why);
      tell(std::move(r));
      return;
    }
    auto found = find_resume(dir, job, params, resume_at_end::taken);
    if (!found) {
      r.error = fault{errc::checkpoint_failed, "cannot restart in place from " + dir + ": " + found.error().message};
      tell(std::move(r));
      return;
    }
    if (training_over && found->clock < steps_per_epoch(job) * job.train.epochs)
      return unfinished(found->step);
    for (const auto& skipped : found->skipped) spdlog::warn("coordinator: the restart passed over {}", skipped);
    auto taken = take_loss_record(dir, job.job_id, found->step);
    found->steps_replayed = taken.steps_replayed;
    for (const auto& w : taken.warnings) spdlog::warn("coordinator: {}", w);
    r.from = std::move(*found);
    tell(std::move(r));
  });
}

void on_restart_ready(coord_pointer self, restart_ready& r) {
  auto& st = self->state;
  if (!st.restarting) return;
  if (r.error) {
    std::variant<job_result, fault> failed = *r.error;
    finish(self, failed);
    return;
  }
  st.core = std::make_unique<job_core>(st.job, *st.layout, st.obs, job_clock::now());
  if (const auto bytes = st.core->frame_bytes()) set_frame_bound(bytes);
  if (r.from) {
    st.core->resume_from(*r.from);
    if (r.from->clock >= steps_per_epoch(st.job) * st.job.train.epochs)  // Note [A shard lost after training]
      spdlog::info("coordinator: restarting from the end checkpoint {}: only the shard servers join again",
                   r.from->step);
    else
      spdlog::info("coordinator: restarting from checkpoint {} (the workers go on from step {}{})", r.from->step,
                   r.from->clock,
                   r.from->steps_replayed ? "; it repeats " + std::to_string(*r.from->steps_replayed) + " steps" : "");
  }
  st.core->restarted_in_place(st.restarts);
  st.restarting = false;
  auto held = std::exchange(st.held_joins, {});
  for (auto& join : held) join();
}

bool hold_join(coord_pointer self, std::function<void()> join) {
  auto& st = self->state;
  if (!st.restarting) return false;
  st.held_joins.push_back(std::move(join));
  return true;
}

// Note [Replacing a key-value shard]: the newest complete checkpoint, found on the
// committer's thread after any commit under way.
void carry(coord_pointer self, job_actions::find_shard_checkpoint&) {
  auto& st = self->state;
  if (!st.committer) st.committer = std::make_unique<serial_worker>(std::numeric_limits<std::size_t>::max());
  auto tell = thread_mail(caf::actor_cast<caf::actor_addr>(self));
  st.committer->post([tell, job = st.core->job()] {
    replacement_found r;
    auto found = find_resume(job.checkpoints.dir, job, 0);
    if (found)
      r.from = std::move(*found);
    else
      r.error = found.error().message;
    tell(std::move(r));
  });
}

void on_replacement_found(coord_pointer self, replacement_found& r) {
  const expected<resume_point> found =
      r.from ? expected<resume_point>(std::move(*r.from)) : expected<resume_point>(failure{r.error});
  drive(self, [&](job_core& c) { return c.replacement_checkpoint(found); });
}

void carry(coord_pointer self, job_actions::start_shard& a) {
  auto& st = self->state;
  shard_start start{a.members, {}};
  for (std::uint32_t rank : a.members.workers)
    start.identities.push_back(identity_of(caf::actor_cast<caf::strong_actor_ptr>(st.members.at(rank))));
  const std::uint32_t s = a.shard;
  self->request(st.shards[s], request_timeout(self), start_atom::value, std::move(start))
      .then([=](caf::ok_atom) { drive(self, [&](job_core& c) { return c.shard_replaced(s, job_clock::now()); }); },
            failing(self, errc::shard_lost, "the server in place of shard " + std::to_string(s) + " did not start"));
}

// Sent as the coordinator, the only sender a member takes it from.
void carry(coord_pointer self, job_actions::announce_shard& a) {
  auto& st = self->state;
  kv_shard_back back{a.shard, a.host, a.port, a.step, {}};
  if (a.host.empty()) back.handle.push_back(st.shards[a.shard]);  // one process: by handle
  for (std::uint32_t r : a.to)
    if (r < st.members.size() && st.members[r])
      caf::unsafe_send_as(self, caf::actor_cast<caf::actor>(st.members[r]), kv_back_atom::value, back);
}

}  // namespace troupe::coordinator_shell
