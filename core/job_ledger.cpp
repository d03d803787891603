// job_ledger: epoch sums, staleness deltas, the result.
#include "core/job_ledger.hpp"

#include <algorithm>

#include "core/job.hpp"

namespace troupe {

namespace {

double seconds(job_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

staleness_totals sum_stats(const std::vector<shard_stats>& stats) {
  staleness_totals t;
  for (const auto& s : stats) {
    t.sum += s.staleness_sum;
    t.count += s.staleness_count;
    t.max = std::max(t.max, s.staleness_max);
    t.rejected += s.rejected;
  }
  return t;
}

job_ledger::job_ledger(const job_spec& job) : job_(job), peak_stored_(job.pipeline_stages, 0) {
  if (job.pipeline_stages > 1) bubble_.emplace(job.pipeline_stages);
}

void job_ledger::resumed(std::int64_t step, std::int64_t clock, std::optional<std::int64_t> steps_replayed) {
  resumed_step_ = step;
  steps_replayed_ = steps_replayed.value_or(-1);
  trained_before_ = samples_before(job_, clock);
}

void job_ledger::start(job_clock::time_point now) { t_start_ = epoch_start_ = now; }

void job_ledger::step(const step_report& r, job_clock::time_point now) {
  if (!started_) {
    started_ = true;
    t_start_ = epoch_start_ = now;
  }
  samples_ += r.samples;
  samples_dropped_ += r.samples_dropped;
  if (bubble_) bubble_->note(r);
}

void job_ledger::epoch(const worker_epoch& r) {
  auto& sums = epochs_[r.epoch];
  sums.loss_sum += r.loss_sum;
  sums.steps += r.steps;
  sums.samples += r.samples;
}

void job_ledger::done(const worker_done& r, job_clock::time_point now) {
  auto& peak = peak_stored_[r.rank % job_.pipeline_stages];
  peak = std::max(peak, r.peak_stored);
  bytes_pushed_ += r.bytes_pushed;
  steps_done_ += r.clock;
  samples_dropped_ += r.samples_dropped;
  if (!first_done_) first_done_ = std::make_pair(now, samples_ - samples_dropped_);
}

void job_ledger::training_over(job_clock::time_point now) { t_end_ = now; }

epoch_summary job_ledger::open_summary(std::int32_t e, std::uint32_t live, job_clock::time_point now) {
  const epoch_sums sums = epochs_[e];
  epoch_summary s;
  s.epoch = e;
  s.epochs = job_.train.epochs;
  s.seconds = seconds(now - t_start_);
  const double wall = seconds(now - epoch_start_);
  s.samples_per_second = wall > 0 ? static_cast<double>(sums.samples) / wall : 0.0;
  s.train_loss = sums.steps > 0 ? sums.loss_sum / static_cast<double>(sums.steps) : 0.0;
  s.live_workers = live;
  epoch_start_ = now;
  if (bubble_) {
    s.pipeline_stages = job_.pipeline_stages;
    s.microbatches = job_.microbatches;
    s.bubble = bubble_->fraction(e);
    s.theoretical_bubble = theoretical_bubble(static_cast<int>(job_.pipeline_stages), job_.microbatches);
  }
  return s;
}

void job_ledger::add_staleness(epoch_summary& s, const staleness_totals& t) {
  const std::int64_t n = t.count - at_last_close_.count;
  s.mean_staleness = n > 0 ? static_cast<double>(t.sum - at_last_close_.sum) / static_cast<double>(n) : 0.0;
  s.max_staleness = t.max;
  at_last_close_ = t;
}

void job_ledger::record_final(const epoch_summary& s) {
  final_evaluated_ = s.evaluated;
  final_accuracy_ = s.test_accuracy;
  final_loss_ = s.test_loss;
}

std::optional<std::string> job_ledger::check_accuracy(const epoch_summary& s, std::int64_t classes) {
  if (!s.evaluated) return std::nullopt;
  return chance_.check(s.epoch, s.test_accuracy, s.train_loss, classes);
}

job_result job_ledger::result(const staleness_totals& t, std::int64_t workers_lost, tensor params) const {
  job_result r;
  r.mode = std::string(name_of(job_.mode));
  r.workers = job_.workers;
  r.servers = job_.servers;
  r.pipeline_stages = job_.pipeline_stages;
  r.microbatches = job_.microbatches;
  r.bubble = bubble_ ? bubble_->fraction() : 0.0;
  r.peak_stored = peak_stored_;
  r.push_bytes_per_step = steps_done_ > 0 ? static_cast<double>(bytes_pushed_) / static_cast<double>(steps_done_) : 0.0;
  r.epochs = job_.train.epochs;
  r.evaluated = final_evaluated_;
  r.test_accuracy = final_accuracy_;
  r.test_loss = final_loss_;
  r.accuracy_at_chance_epoch = chance_.first_chance_epoch();
  r.train_seconds = seconds(t_end_ - t_start_);
  r.samples = samples_ - samples_dropped_;  // Note [Backup workers]: a dropped gradient trained nothing
  r.samples_dropped = samples_dropped_;
  r.samples_planned =
      (samples_per_worker(job_) * job_.train.epochs - trained_before_) * static_cast<std::int64_t>(job_.workers);
  r.resumed_from_step = resumed_step_;
  r.steps_replayed = steps_replayed_;
  r.restarts_in_place = restarts_in_place_;
  r.samples_per_second = r.train_seconds > 0 ? static_cast<double>(r.samples) / r.train_seconds : 0.0;
  if (first_done_) {
    const double secs = seconds(first_done_->first - t_start_);
    r.steady_samples_per_second = secs > 0 ? static_cast<double>(first_done_->second) / secs : 0.0;
  }
  r.mean_staleness = t.count > 0 ? static_cast<double>(t.sum) / static_cast<double>(t.count) : 0.0;
  r.max_staleness = t.max;
  r.workers_lost = workers_lost;
  r.rejected = t.rejected;
  r.params = std::move(params);
  return r;
}

}  // namespace troupe
