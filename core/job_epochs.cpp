// job_core, part 3: closing epochs (the shards' statistics, the parameters, an
// evaluation, the summary), the end of training and the job's result.
#include "core/job_core.hpp"

namespace troupe {

using namespace job_actions;

// Closes every epoch all live members have finished. The last epoch is closed only once
// training is over, so its evaluation sees every gradient (all pushes are acknowledged
// before a member reports done).
void job_core::check_epochs(job_actions_list& out, time_point now) {
  while (epochs_closed_ < job_.train.epochs) {
    const std::int32_t e = epochs_closed_;
    if (e + 1 == job_.train.epochs && phase_ != job_phase::finishing) return;
    bool complete = ledger_.has_reports_for(e);
    for (const auto& w : members_)
      if (w.live && !w.done && w.epochs_reported <= e) complete = false;
    if (!complete) return;
    ++epochs_closed_;
    close_epoch(e, out, now);
  }
}

// Summarises epoch e: gathers the shards' statistics (and the parameters, unless compute
// is simulated), then evaluates and reports.
void job_core::close_epoch(std::int32_t e, job_actions_list& out, time_point now) {
  epoch_summary s = ledger_.open_summary(e, live_members(), now);
  if (m_ && s.pipeline_stages > 1) {
    m_->pipeline_bubble("measured")->Set(s.bubble);
    m_->pipeline_bubble("theoretical")->Set(s.theoretical_bubble);
  }
  ++evals_pending_;
  summaries_[e] = s;
  start_gather(e, job_.simulate_compute_ms <= 0.0, out);
}

// With --servers 0 there are no shards: the parameters are those the stages sent with
// the epoch's reports, and there are no statistics.
void job_core::start_gather(std::optional<std::int32_t> epoch, bool with_params, job_actions_list& out) {
  const std::uint64_t id = next_gather_++;
  pending_gather& g = gathers_[id];
  g.epoch = epoch;
  if (shard_hosts_.empty()) {
    if (with_params && epoch) g.params = std::move(epoch_params_[*epoch]);
    if (epoch) epoch_params_.erase(*epoch);
    gathered(id, out);
    return;
  }
  if (with_params) g.params = tensor({num_params_});
  g.pending = shard_hosts_.size() * (with_params ? 2 : 1);
  out.push_back(gather{id, with_params});
}

job_actions_list job_core::on_stats(std::uint64_t id, const shard_stats& s) {
  auto it = gathers_.find(id);
  if (it == gathers_.end() || phase_ == job_phase::finished) return {};
  it->second.stats.push_back(s);
  job_actions_list out;
  if (--it->second.pending == 0) gathered(id, out);
  return out;
}

job_actions_list job_core::on_snapshot(std::uint64_t id, std::uint32_t shard, const params_reply& r) {
  auto it = gathers_.find(id);
  if (it == gathers_.end() || phase_ == job_phase::finished) return {};
  if (shard >= table_.shards() || held_numel(r.params) != table_.shard_numel[shard] || r.params.type() != dtype::f32)
    return fail({errc::bad_shape, "shard " + std::to_string(shard) + " sent a snapshot of the wrong size"});
  unpack_shard(it->second.params, r.params, table_.ranges_of(shard));
  job_actions_list out;
  if (--it->second.pending == 0) gathered(id, out);
  return out;
}

void job_core::gathered(std::uint64_t id, job_actions_list& out) {
  pending_gather g = std::move(gathers_.at(id));
  gathers_.erase(id);
  const staleness_totals totals = sum_stats(g.stats);
  if (!g.epoch) {  // the final gather
    job_result r = ledger_.result(totals, workers_lost_, std::move(final_params_));
    r.checkpoints_written = checkpoints_written_;
    r.checkpoints_failed = checkpoints_failed_;
    if (dealer_) r.samples_redealt = dealer_->dealt();
    if (r.samples < r.samples_planned) {
      std::string why = redealt_account(r);
      if (job_.backup_workers > 0)  // Note [Backup workers]
        why += std::string(why.empty() ? "" : "; ") + "--backup-workers dropped " + std::to_string(r.samples_dropped) +
               " samples' late gradients, and the late workers skipped the rounds that closed without them";
      out.push_back(note{"trained " + std::to_string(r.samples) + " of the " + std::to_string(r.samples_planned) +
                         " samples planned" + (why.empty() ? "" : ": " + why)});
    }
    finish(std::move(r), out);
    return;
  }
  const std::int32_t e = *g.epoch;
  ledger_.add_staleness(summaries_[e], totals);
  if (job_.simulate_compute_ms > 0.0) {
    report_epoch(e, out);
    return;
  }
  if (e + 1 == job_.train.epochs) final_params_ = g.params;
  out.push_back(evaluate{e, std::move(g.params)});
}

job_actions_list job_core::on_evaluated(const eval_reply& r) {
  auto it = summaries_.find(r.epoch);
  if (it == summaries_.end() || phase_ == job_phase::finished) return {};
  it->second.evaluated = true;
  it->second.test_accuracy = r.accuracy;
  it->second.test_loss = r.loss;
  job_actions_list out;
  report_epoch(r.epoch, out);
  return out;
}

void job_core::report_epoch(std::int32_t e, job_actions_list& out) {
  const epoch_summary s = summaries_.at(e);
  summaries_.erase(e);
  if (m_) {
    m_->epoch->Set(s.epoch + 1);
    if (s.trained) m_->train_loss->Set(s.train_loss);
    if (s.evaluated) m_->test_accuracy->Set(s.test_accuracy);
  }
  out.push_back(epoch_closed{s});
  if (auto why = ledger_.check_accuracy(s, layout_.output_shape()[layout_.output_shape().rank() - 1])) out.push_back(note{*why});
  if (e + 1 == job_.train.epochs) ledger_.record_final(s);
  --evals_pending_;
  maybe_finalize(out);
}

void job_core::check_training_done(job_actions_list& out, time_point now) {
  if (phase_ != job_phase::training) return;
  bool any_done = false;
  for (const auto& w : members_) {
    if (w.live && !w.done) return;
    any_done = any_done || w.done;
  }
  if (!any_done) {
    finish(fault{errc::all_workers_lost, "every worker died before finishing; the first: " +
                                             (first_loss_.empty() ? std::string("see the log") : first_loss_)},
           out);
    return;
  }
  phase_ = job_phase::finishing;
  finishing_since_ = now;
  ledger_.training_over(now);
  check_epochs(out, now);
  maybe_finalize(out);
}

// Note [A shard lost after training]
// A member that has finished its last step leaves, and its node ends. The job still needs
// its shards: the last epoch's evaluation gathers their parameters, the end checkpoint
// is theirs, and the result gathers their statistics. A shard server lost then is
// restarted in place as during training (Note [Restarting in place] in
// actors/coordinator_restart.cpp), but the finished members will not join again. So
// the restart names them (job_actions::restart::finished), and:
//   - when the end checkpoint is complete, the next core resumes from it (find_resume's
//     resume_at_end::taken) and admits only the shards: they restore the trained values,
//     the last epoch is evaluated again from them (its line says so: nothing trained
//     since), and the job ends with that result, as it would have without the loss;
//   - when it is not, the steps after the newest checkpoint are lost with the shard and a
//     finished member would not train its share of them again, so the job stops at once,
//     saying to go on with --resume (launch does, starting every process again), instead
//     of waiting for that member until --stall-timeout.
// A member that joins the resumed core is refused: there is nothing left to train.
void job_core::evaluate_end(job_actions_list& out, time_point now) {
  phase_ = job_phase::finishing;
  finishing_since_ = now;
  ledger_.training_over(now);
  const std::int32_t e = epochs_closed_++;
  out.push_back(note{"training had ended when the shard was lost: the job evaluates its end checkpoint " +
                     std::to_string(resume_->step) + " and ends"});
  close_epoch(e, out, now);
  summaries_[e].trained = false;
  maybe_finalize(out);
}

void job_core::maybe_finalize(job_actions_list& out) {
  if (phase_ != job_phase::finishing || finalizing_ || evals_pending_ > 0 || epochs_closed_ < job_.train.epochs ||
      !final_checkpoint_settled())
    return;
  finalizing_ = true;
  start_gather(std::nullopt, false, out);
}

}  // namespace troupe
