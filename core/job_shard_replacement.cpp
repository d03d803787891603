// job_core, part 6: a key-value job that lost a shard server goes on, and the server that
// joins in its place restores the lost shard's keys from the newest checkpoint (Note
// [Replacing a key-value shard]).
//
// Note [Replacing a key-value shard]
// A training job that loses a shard restarts in place: every member stops and joins again
// (Note [Restarting in place] in actors/coordinator_restart.cpp). A key-value job's members
// are users' loops, which cannot be stopped and started again from outside, so with
// --checkpoint-dir (and --on-shard-loss not fail) the job goes on around the loss:
//   - the core stays in training and the members stay; each one's store holds its calls
//     to the lost shard (Note [A shard away] in client/kv_member.cpp), so the loops go on
//     without an exception as far as the other shards let them;
//   - the shell finds the newest complete checkpoint off its thread. None, or one that
//     lacks a key with parts on the lost shard (defined after it was taken), ends the job
//     with shard_lost saying so: those values are gone;
//   - the next server that joins (`launch` starts the lost process again; an operator or
//     supervisor runs the same `troupe node --role server` command) takes the lost index,
//     restores the lost shard's file of that checkpoint (values, the shards' optimizer and
//     its state, versions) and starts with the live members; then every member is told
//     where the shard is now and the step its keys went back to, and sends its held calls;
//     the members named stragglers are named again, so the new shard's ssp bound leaves
//     them out as the others' does (Note [Naming stragglers]);
//   - member joins wait until then (the new shard must admit them too); a second shard
//     lost meanwhile, or no server within --stall-timeout, ends the job with shard_lost.
// Only the lost shard goes back: the others keep their progress. The keys on the lost
// shard lose the updates since the checkpoint, which in async and ssp is the same as
// losing a few updates; in sync each part's rounds go on from its restored version (a
// member's next push there is that round's), so the job is no longer bitwise equal to a
// run that lost nothing. A loop that needs an exact rollback stops at kv.restored_step and
// goes back itself (--resume does that for a whole job).
#include <algorithm>

#include "core/job_core.hpp"

namespace troupe {

using namespace job_actions;

bool job_core::replaces_shards() const { return replaces_kv_shards(job_); }

job_actions_list job_core::shard_lost_in_place(std::uint32_t shard, const std::string& lost, time_point now) {
  if (phase_ != job_phase::training)
    return fail({errc::shard_lost, lost + " before the job started training; the job stops"});
  if (replacing_)
    return fail({errc::shard_lost, lost + " while shard " + std::to_string(replacing_->shard) +
                                       " was being replaced; the job stops (go on with --resume " +
                                       job_.checkpoints.dir + ")"});
  replacing_ = shard_replacement{shard, now, std::nullopt, std::nullopt, {}, 0};
  return {note{lost + "; the job goes on: the next shard server that joins takes its place with its keys from the "
                      "newest checkpoint in " +
               job_.checkpoints.dir + ", and calls to it wait until then"},
          find_shard_checkpoint{shard}};
}

job_actions_list job_core::replacement_checkpoint(const expected<resume_point>& found) {
  if (!replacing_ || phase_ == job_phase::finished) return {};
  const std::string lost = "shard " + std::to_string(replacing_->shard) + " was lost";
  if (!found)
    return fail({errc::shard_lost, lost + " and its keys cannot be restored: " + found.error().message});
  for (const auto& key : registry_->keys()) {
    const bool here = std::any_of(key.parts.begin(), key.parts.end(),
                                  [&](const kv_part& p) { return p.shard == replacing_->shard; });
    const bool kept = std::any_of(found->keys.begin(), found->keys.end(),
                                  [&](const kv_key_layout& k) { return k.id == key.id; });
    if (here && !kept)
      return fail({errc::shard_lost, lost + " holding key " + kv_key_display(key.name) + ", which was defined after "
                                     "checkpoint " + std::to_string(found->step) + " in " + found->shards.dir +
                                     ": its values are gone, so the job stops"});
  }
  replacing_->from = *found;
  job_actions_list out;
  maybe_start_replacement(out);
  return out;
}

void job_core::admit_replacement_shard(ticket t, const shard_join& j, job_actions_list& out) {
  if (!replacing_ || replacing_->join) {
    out.push_back(refuse{t, {errc::cluster_full, "the job already has its " + std::to_string(job_.servers) + " shards"}});
    return;
  }
  replacing_->join = t;
  replacing_->host = j.host;
  replacing_->port = j.port;
  maybe_start_replacement(out);
}

void job_core::maybe_start_replacement(job_actions_list& out) {
  if (!replacing_ || !replacing_->join || !replacing_->from) return;
  const std::uint32_t s = replacing_->shard;
  shard_hosts_[s] = replacing_->host;
  shard_ports_[s] = replacing_->port;
  out.push_back(welcome_shard{*replacing_->join, shard_welcome{s, job_, {}, replacing_->from->shards}});
  membership m;
  for (std::uint32_t r = 0; r < members_.size(); ++r)
    if (members_[r].live && !members_[r].done && !admitting_.count(r)) m.workers.push_back(r);
  out.push_back(start_shard{s, std::move(m)});
}

job_actions_list job_core::shard_replaced(std::uint32_t shard, time_point now) {
  if (!replacing_ || replacing_->shard != shard || phase_ == job_phase::finished) return {};
  const std::int64_t step = replacing_->from->step;
  replacing_.reset();
  ++shards_replaced_;
  if (m_) m_->restarts_in_place->Increment();
  last_progress_ = now;
  job_actions_list out;
  announce_shard a{shard, shard_hosts_[shard], shard_ports_[shard], step, {}};
  for (std::uint32_t r = 0; r < members_.size(); ++r)
    if (members_[r].live && !members_[r].done && !admitting_.count(r)) a.to.push_back(r);
  out.push_back(std::move(a));
  for (std::uint32_t r = 0; r < members_.size(); ++r)  // the new shard's ssp bound leaves them out too
    if (members_[r].straggler && members_[r].live && !members_[r].done) out.push_back(name_straggler{r, true});
  out.push_back(note{"shard " + std::to_string(shard) + " is back with its keys from checkpoint " +
                     std::to_string(step) + "; the members go on"});
  for (ticket t : std::exchange(held_member_joins_, {})) admit_new_member(t, out);
  return out;
}

std::optional<fault> job_core::replacement_overdue(time_point now) const {
  if (!replacing_ || now - replacing_->since <= std::chrono::milliseconds(job_.stall_timeout_ms)) return std::nullopt;
  return fault{errc::shard_lost,
               "shard " + std::to_string(replacing_->shard) + " was lost and " +
                   (replacing_->join ? std::string("its replacement did not start")
                                     : std::string("no shard server joined in its place")) +
                   " within --stall-timeout " + std::to_string(job_.stall_timeout_ms / 1000) +
                   " s; the job stops (go on with --resume " + job_.checkpoints.dir + ")"};
}

}  // namespace troupe
