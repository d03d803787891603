// job_core, part 2: the members' progress reports, local group ids, losing members and
// shards, the stall watchdog and the metrics they move.
#include <algorithm>
#include <limits>

#include "base/fingerprint.hpp"
#include "core/job_core.hpp"

namespace troupe {

using namespace job_actions;

namespace {

std::string plural_members(const job_spec& job) { return job.pipeline_stages > 1 ? " members" : " workers"; }

}  // namespace

// ---------------------------------------------------------------------------------------
// Progress

job_actions_list job_core::on_step(const step_report& r, time_point now) {
  if (phase_ == job_phase::finished) return {};
  if (r.rank >= members_.size() || !members_[r.rank].live) return {};
  ledger_.step(r, now);
  members_[r.rank].clock = r.clock;
  last_progress_ = now;
  if (m_) {
    std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = 0;
    for (const auto& w : members_)
      if (w.live && !w.done) {
        lo = std::min(lo, w.clock);
        hi = std::max(hi, w.clock);
      }
    if (hi >= lo) m_->clock_spread->Set(static_cast<double>(hi - lo));
  }
  job_actions_list out;
  note_busy(r, out);
  if (dealer_) {
    dealer_->reported(r.rank, r.clock);
    balance_shares(r, out);
    deal_rows(out);
  }
  return out;
}

job_actions_list job_core::on_epoch(const worker_epoch& r, time_point now) {
  if (phase_ == job_phase::finished) return {};
  if (r.rank >= members_.size() || !members_[r.rank].live) return {};
  ledger_.epoch(r);
  members_[r.rank].epochs_reported = r.epoch + 1;
  last_progress_ = now;
  if (auto differ = replicas_differ(r)) return fail(std::move(*differ));
  if (shard_hosts_.empty() && !r.params.empty()) {  // --servers 0: this stage's part of the model
    const stage_span span = job_stage_spans(job_, layout_)[r.rank % job_.pipeline_stages];
    if (r.params.numel() != span.numel || r.params.type() != dtype::f32)
      return fail({errc::bad_shape, member_name(r.rank) + " reported " + std::to_string(r.params.numel()) + " " +
                                        std::string(name_of(r.params.type())) + " parameters, expected " +
                                        std::to_string(span.numel) + " f32"});
    auto& full = epoch_params_[r.epoch];
    if (full.empty()) full = tensor({num_params_});
    copy(full.view().flat(span.param_offset, span.numel), r.params);
  }
  job_actions_list out;
  check_epochs(out, now);
  return out;
}

// Note [Replicas agree]
// In --mode allreduce every replica applies the same update to the same bits, so after
// each epoch stage i of every replica holds the same parameters (Note [Ring all-reduce of
// gradients] in member_ring.cpp); each reports their FNV-1a. Replicas that differ can
// only come from a fault (memory or a device that computed wrongly) or a bug, never from
// the hyper-parameters, and would make the run's result depend on which replica is
// asked: the job ends with `diverged` naming both and the epoch, and a job with
// checkpoints can go on from the last one (--resume). The first report of each epoch and
// stage is the reference; a few bytes per epoch are kept.
std::optional<fault> job_core::replicas_differ(const worker_epoch& r) {
  if (job_.mode != sync_mode::allreduce || r.params_fnv1a == 0) return std::nullopt;
  const auto [it, first] =
      replica_fnv1a_.try_emplace({r.epoch, r.rank % job_.pipeline_stages}, r.rank, r.params_fnv1a);
  if (first || it->second.second == r.params_fnv1a) return std::nullopt;
  return fault{errc::diverged,
               member_name(r.rank) + " and " + member_name(it->second.first) + " hold different parameters after epoch " +
                   std::to_string(r.epoch + 1) + " (FNV-1a " + hex64(r.params_fnv1a) + " against " +
                   hex64(it->second.second) +
                   "), though --mode allreduce keeps every replica bitwise equal: a fault of a machine (memory, a "
                   "device) or a bug in Troupe, not of the hyper-parameters; go on from the last checkpoint "
                   "(--resume) and report it if it happens again"};
}

job_actions_list job_core::on_done(const worker_done& r, time_point now) {
  if (phase_ == job_phase::finished) return {};
  if (r.rank >= members_.size()) return {};
  if (job_.kv) return member_gone(r.rank, false, "", now);  // Note [Jobs of keys]
  members_[r.rank].done = true;
  members_[r.rank].clock = r.clock;
  count_nodes();
  last_progress_ = now;
  ledger_.done(r, now);
  job_actions_list out;
  if (dealer_) {
    dealer_->done(r.rank);
    deal_rows(out);
  }
  check_training_done(out, now);
  return out;
}

job_actions_list job_core::on_group_id(std::uint32_t sender, const group_id& g) {
  if (phase_ == job_phase::finished) return {};
  if (g.leader >= members_.size() || members_[g.leader].group.empty() || members_[g.leader].group.front() != g.leader ||
      g.leader != sender)
    return {note{"ignored a local group id from " + member_name(sender) + " claiming to lead worker " +
                 std::to_string(g.leader) + "'s group"}};
  relay_group_id relay{{}, g};
  for (std::uint32_t r : members_[g.leader].group)
    if (r != g.leader && members_[r].live) relay.to.push_back(r);
  return {std::move(relay)};
}

// ---------------------------------------------------------------------------------------
// Failures and the watchdog

job_actions_list job_core::on_member_down(std::uint32_t rank, const std::optional<fault>& reason,
                                          const std::string& why, time_point now) {
  if (phase_ == job_phase::finished || rank >= members_.size()) return {};
  if (job_.kv) return member_gone(rank, true, why, now);  // Note [Jobs of keys]
  member& w = members_[rank];
  if (!w.live || w.done) return {};  // a finished member quits
  w.live = false;
  admitting_.erase(rank);
  if (reason && reason->code == errc::diverged) return fail(*reason);
  // Note [Ring all-reduce of gradients] in core/member_ring.cpp.
  if (job_.mode == sync_mode::allreduce && job_.workers > 1)
    return fail({errc::stage_lost, member_name(rank) + " is gone (" + why +
                                       "); the replicas of --mode allreduce sum their gradients in a ring, which "
                                       "cannot finish a step without it, so the job stops"});
  ++workers_lost_;
  if (m_) m_->workers_lost->Increment();
  count_nodes();
  if (first_loss_.empty()) first_loss_ = member_name(rank) + ": " + why;
  job_actions_list out{note{member_name(rank) + " is gone (" + why + "); continuing with " +
                            std::to_string(live_members()) + plural_members(job_)},
                       remove_from_shards{rank}};
  if (dealer_) dealer_->lost(rank);
  if (!standby_.empty()) {
    const ticket t = standby_.front();
    standby_.erase(standby_.begin());
    admit_replacement(t, rank, out, now);
    deal_lost_rows(rank, out);
    return out;
  }
  deal_lost_rows(rank, out);
  check_epochs(out, now);
  check_training_done(out, now);
  return out;
}

job_actions_list job_core::on_shard_down(std::uint32_t shard, const std::string& why) {
  if (phase_ == job_phase::finished) return {};
  const std::string& dir = job_.checkpoints.dir;
  std::int64_t reached = std::numeric_limits<std::int64_t>::max();
  for (const auto& m : members_)
    if (m.live && !m.done) reached = std::min(reached, m.clock);
  const std::string when =
      reached == std::numeric_limits<std::int64_t>::max() ? "" : " at step " + std::to_string(reached);
  const std::string lost = "shard " + std::to_string(shard) + " died" + when + " (" + why + ")";
  if (replaces_shards()) return shard_lost_in_place(shard, lost, last_watch_);
  if (restarts_on_shard_loss(job_)) {  // Note [Restarting in place] in actors/coordinator_restart.cpp
    job_actions_list out;
    const fault f{errc::shard_lost, lost};
    std::vector<std::uint32_t> finished;  // Note [A shard lost after training]
    for (std::uint32_t r = 0; r < members_.size(); ++r)
      if (members_[r].done) finished.push_back(r);
    phase_ = job_phase::finished;
    note_loss(f, out);
    out.push_back(job_actions::restart{f, std::move(finished)});
    return out;
  }
  return fail({errc::shard_lost,
               lost + "; the job stops; " +
                   (dir.empty() ? std::string("with --checkpoint-dir it could go on from its newest checkpoint (launch and "
                                              "node restart it in place; --resume by hand)")
                                : "(--on-shard-loss fail) continue it from its last checkpoint with --resume " + dir)});
}

// Note [Paused processes]
// The watchdog ticks every watch_interval. A gap between two ticks longer than paused_gap
// means this process did not run: stopped with Ctrl-Z or SIGSTOP, held in a debugger, or
// on a paused VM. Its own members did not run either, so that time is nobody's lack of
// progress: it moves the last progress on instead of counting toward --stall-timeout
// (before, such a job failed with "stalled" the moment it resumed). A member in another
// process that stopped meanwhile is still caught: its silence counts from the first tick
// after the pause. A pause shorter than paused_gap counts like any other time.
job_actions_list job_core::on_tick(time_point now) {
  if (phase_ == job_phase::finished) return {};
  if (phase_ == job_phase::finishing)  // the evaluations and checkpoints have deadlines
    return job_.kv ? overdue_key_checkpoints(now) : overdue_final_checkpoint(now);
  const auto gap = now - last_watch_;
  last_watch_ = now;
  if (gap > paused_gap) last_progress_ = std::min(now, last_progress_ + (gap - watch_interval));
  if (auto overdue = replacement_overdue(now)) return fail(*overdue);  // Note [Replacing a key-value shard]
  // A user's loop decides its own pace (Note [Jobs of keys]): no stall watchdog.
  if (!job_.kv && now - last_progress_ > std::chrono::milliseconds(job_.stall_timeout_ms)) {
    std::string who;
    if (phase_ != job_phase::training) {
      who = std::to_string(shard_hosts_.size()) + " of " + std::to_string(job_.servers) + " shards and " +
            std::to_string(pending_joins_.size()) + " of " + std::to_string(members(job_)) + " workers joined";
      if (restarts_in_place_ > 0 && shard_hosts_.size() < job_.servers)
        who += " since the job restarted after losing a shard server; start one in its place with `troupe node "
               "--role server --join` and this job's coordinator address";
    } else {
      for (std::uint32_t r = 0; r < members_.size(); ++r)
        if (members_[r].live && !members_[r].done)
          who += (who.empty() ? "" : ", ") + member_name(r) + " at clock " + std::to_string(members_[r].clock);
    }
    return fail({errc::stalled, "no progress for " + std::to_string(job_.stall_timeout_ms / 1000) + " s (" + who + ")"});
  }
  update_step_rates(now);
  job_actions_list out;
  maybe_request_checkpoint(now, out);
  return out;
}

job_actions_list job_core::fail(fault f) {
  job_actions_list out;
  finish(std::move(f), out);
  return out;
}

void job_core::finish(std::variant<job_result, fault> outcome, job_actions_list& out) {
  if (phase_ == job_phase::finished) return;
  phase_ = job_phase::finished;
  const fault* f = std::get_if<fault>(&outcome);
  if (f && is_node_loss(f->code)) note_loss(*f, out);
  out.push_back(job_actions::finish{std::move(outcome)});
}

void job_core::note_loss(const fault& f, job_actions_list& out) const {
  if (job_.checkpoints.dir.empty()) return;  // Note [Steps replayed]
  std::int64_t reached = start_clock_;
  for (const auto& m : members_) reached = std::max(reached, m.clock);
  out.push_back(job_actions::record_loss{loss_record{job_.job_id, reached, to_string(f)}});
}

void job_core::count_nodes() {
  if (!m_) return;
  m_->nodes_up("coordinator")->Set(1);
  m_->nodes_up("server")->Set(static_cast<double>(shard_hosts_.size()));
  double workers = 0;
  for (const auto& w : members_) workers += w.live && !w.done;
  m_->nodes_up("worker")->Set(workers);
}

// Each live member's step rate (smoothed over ticks) relative to the median: a straggler
// shows well below 1 under its rank.
void job_core::update_step_rates(time_point now) {
  const double dt = std::chrono::duration<double>(now - last_tick_).count();
  last_tick_ = now;
  if (phase_ != job_phase::training || dt <= 0) return;
  std::vector<double> rates;
  for (auto& w : members_) {
    const double inst = static_cast<double>(w.clock - w.clock_at_tick) / dt;
    w.clock_at_tick = w.clock;
    w.step_rate = w.step_rate == 0.0 ? inst : 0.7 * w.step_rate + 0.3 * inst;
    if (w.live && !w.done) rates.push_back(w.step_rate);
  }
  if (!m_ || rates.empty()) return;
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  const double median = rates[rates.size() / 2];
  for (std::uint32_t r = 0; r < members_.size(); ++r)
    if (members_[r].live && !members_[r].done)
      m_->relative_step_rate(r)->Set(median > 0 ? members_[r].step_rate / median : 1.0);
}

}  // namespace troupe
