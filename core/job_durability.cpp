// job_core, part 4: checkpoints (the shards' files gathered into one commit, failures
// warned about or fatal) and the start of a resumed job (Note [Resuming a job]).
#include "core/job_core.hpp"

#include <algorithm>

#include "base/check.hpp"
#include "core/residual_checkpoint.hpp"

namespace troupe {

using namespace job_actions;

void job_core::resume_from(const resume_point& r) {
  TROUPE_CHECK(phase_ == job_phase::admitting && shard_hosts_.empty() && members_.empty(),
               "job_core::resume_from after the first join");
  resume_ = r;
  start_clock_ = r.clock;
  if (job_.kv) {  // Note [Key-value checkpoints]: its keys as the checkpoint holds them
    auto keys = kv_registry::restore(job_.servers, job_.big_array_bound, r.keys);
    TROUPE_CHECK(keys.has_value(), "job_core::resume_from: " + (keys ? std::string() : keys.error().message));
    registry_ = std::move(*keys);
  }
  const std::int64_t spe = std::max<std::int64_t>(1, steps_per_epoch(job_));
  epochs_closed_ = static_cast<std::int32_t>(std::min<std::int64_t>(job_.train.epochs, r.clock / spe));
  at_end_ = !job_.kv && r.clock >= spe * job_.train.epochs;
  if (at_end_) {  // Note [A shard lost after training]: the last epoch is evaluated again
    epochs_closed_ = job_.train.epochs - 1;
    checkpoint_settled_ = spe * job_.train.epochs;
  }
  ledger_.resumed(r.step, r.clock, r.steps_replayed);
  if (m_ && r.steps_replayed) m_->steps_replayed()->Set(static_cast<double>(*r.steps_replayed));
}

void job_core::restarted_in_place(std::int64_t times) {
  TROUPE_CHECK(phase_ == job_phase::admitting && shard_hosts_.empty() && members_.empty(),
               "job_core::restarted_in_place after the first join");
  restarts_in_place_ = times;
  ledger_.restarted_in_place(times);
  if (m_) m_->restarts_in_place->Increment();  // the registry outlives the core it replaced
}

job_actions_list job_core::on_checkpoint_saved(const checkpoint_saved& s) {
  if (phase_ == job_phase::finished || s.shard >= checkpoint_writers()) return {};
  job_actions_list out;
  auto& c = checkpoints_[s.step];
  // Note [Key-value checkpoints]: a shard whose keys nobody pushed (or that holds none)
  // reaches no step by itself; the first file of a step asks every shard for it, and
  // such a shard takes its image at once.
  if (job_.kv && c.saved.empty() && c.failed == 0 && checkpoint_writers() > 1)
    out.push_back(request_checkpoint{s.step, {}});
  if (s.error.empty())
    c.saved.push_back(s);
  else if (c.failed++ == 0)  // its other shards' files stay without a manifest: removed by a later commit
    checkpoint_failed(s.step, (job_.servers > 0 ? "shard " : "stage ") + std::to_string(s.shard) + ": " + s.error, out);
  if (c.saved.size() + c.failed >= checkpoint_writers()) {
    if (c.failed == 0) {
      ++commits_pending_;
      out.push_back(
          commit_checkpoint{s.step, std::move(c.saved), registry_ ? registry_->keys() : std::vector<kv_key_layout>{}});
    }
    checkpoints_.erase(s.step);
  }
  // A file the result waited for (Note [The last checkpoints of a key-value job]).
  if (job_.kv) finish_keys(out, finishing_since_);
  return out;
}

job_actions_list job_core::on_checkpoint_begun(const checkpoint_begun& b) {
  if (phase_ == job_phase::finished || !job_.kv || b.shard >= checkpoint_writers()) return {};
  ++checkpoints_[b.step].begun;
  return {};
}

job_actions_list job_core::on_checkpoint_committed(std::int64_t step, const std::optional<std::string>& error) {
  if (phase_ == job_phase::finished) return {};
  job_actions_list out;
  --commits_pending_;
  if (error) {
    checkpoint_failed(step, *error, out);
    if (job_.kv) finish_keys(out, finishing_since_);
    return out;
  }
  ++checkpoints_written_;
  checkpoint_settled_ = std::max(checkpoint_settled_, step);
  maybe_finalize(out);
  if (m_) {
    m_->checkpoints_written->Increment();
    m_->checkpoint_step->Set(static_cast<double>(step));
  }
  if (job_.kv) finish_keys(out, finishing_since_);
  return out;
}

bool job_core::final_checkpoint_settled() const {
  return job_.checkpoints.dir.empty() || checkpoint_settled_ >= steps_per_epoch(job_) * job_.train.epochs;
}

void job_core::maybe_request_checkpoint(time_point now, job_actions_list& out) {
  const auto every = std::chrono::duration<double>(job_.checkpoints.seconds);
  if (job_.checkpoints.dir.empty() || every.count() <= 0.0 || phase_ != job_phase::training ||
      now - last_checkpoint_request_ < every)
    return;
  last_checkpoint_request_ = now;
  // Reported clocks trail the members by a step or so, and the request takes a moment to
  // reach the shards: a margin keeps the step ahead of every shard (Note [Checkpoint steps]).
  constexpr std::int64_t margin = 4;
  std::int64_t fastest = start_clock_;
  for (const auto& m : members_)
    if (m.live && !m.done) fastest = std::max(fastest, m.clock);
  const std::int64_t step = fastest + margin;
  if (step <= requested_step_ || step >= steps_per_epoch(job_) * job_.train.epochs) return;
  requested_step_ = step;
  request_checkpoint r{step, {}};
  const bool residuals = keeps_residuals(job_);
  for (std::uint32_t rank = 0; rank < members_.size(); ++rank)
    if (members_[rank].live && (job_.servers == 0 ? rank < job_.pipeline_stages : residuals))
      r.members.push_back(rank);
  out.push_back(std::move(r));
}

job_actions_list job_core::overdue_final_checkpoint(time_point now) {
  job_actions_list out;
  const auto limit = std::chrono::milliseconds(job_.request_timeout_ms);
  if (final_checkpoint_settled() || now - finishing_since_ <= limit) return out;
  checkpoint_failed(steps_per_epoch(job_) * job_.train.epochs,
                    "not complete " + std::to_string(limit.count() / 1000) +
                        " s (--request-timeout) after training ended; the job's result goes out without it",
                    out);
  return out;
}

void job_core::checkpoint_failed(std::int64_t step, const std::string& why, job_actions_list& out) {
  ++checkpoints_failed_;
  checkpoint_settled_ = std::max(checkpoint_settled_, step);
  if (m_) m_->checkpoints_failed->Increment();
  const std::string what = "checkpoint " + std::to_string(step) + " in " + job_.checkpoints.dir + " failed: " + why;
  if (job_.checkpoints.fatal) {
    finish(fault{errc::checkpoint_failed, what + " (--checkpoint-fatal ends the job)"}, out);
    return;
  }
  out.push_back(note{what + "; training goes on, and the last complete checkpoint stays the one to resume from"});
  maybe_finalize(out);
}

}  // namespace troupe
