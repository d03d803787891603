// The job's accounts, kept by its core: the members' per-epoch sums, the samples trained
// and when, the pipeline bubble, the shards' staleness at each epoch's close, and from
// those each epoch's summary and the job's result. It decides nothing about members; it
// is told what happened, in order.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/bubble_meter.hpp"
#include "core/messages.hpp"
#include "train/chance_watch.hpp"

namespace troupe {

using job_clock = std::chrono::steady_clock;

struct epoch_summary {
  int epoch = 0;  // 0-based
  int epochs = 0;
  double seconds = 0.0;             // since training started
  double samples_per_second = 0.0;  // all workers, over this epoch
  double train_loss = 0.0;          // mean over the epoch's steps of all workers
  double mean_staleness = 0.0;      // of the gradients applied in this epoch
  std::int64_t max_staleness = 0;   // since the start
  bool evaluated = false;
  // false: the epoch was only evaluated again, from the job's end checkpoint (Note [A
  // shard lost after training] in core/job_epochs.cpp); its samples and loss are not known.
  bool trained = true;
  double test_accuracy = 0.0, test_loss = 0.0;
  std::uint32_t live_workers = 0;  // members: workers, or stages of all replicas
  // Pipelines (pipeline_stages > 1): the bubble measured over this epoch's steps and the
  // (K - 1) / (M + K - 1) of equal stages.
  std::uint32_t pipeline_stages = 1;
  std::int32_t microbatches = 1;
  double bubble = 0.0, theoretical_bubble = 0.0;
};

// What the shards' statistics add up to.
struct staleness_totals {
  std::int64_t sum = 0, count = 0, max = 0, rejected = 0;
};
staleness_totals sum_stats(const std::vector<shard_stats>& stats);

class job_ledger {
 public:
  explicit job_ledger(const job_spec& job);

  // The job resumed from checkpoint `step` with its members at `clock` (Note [Resuming a
  // job]): what the earlier run trained is not planned again.
  // steps_replayed: of the lost run's, when known (Note [Steps replayed]).
  void resumed(std::int64_t step, std::int64_t clock, std::optional<std::int64_t> steps_replayed);
  // The job restarted in place this many times so far (Note [Restarting in place] in
  // actors/coordinator_restart.cpp).
  void restarted_in_place(std::int64_t times) { restarts_in_place_ = times; }

  // Training time counts from the first step (after the members have loaded their data).
  void start(job_clock::time_point now);
  void step(const step_report& r, job_clock::time_point now);
  // A member finished epoch r.epoch.
  void epoch(const worker_epoch& r);
  void done(const worker_done& r, job_clock::time_point now);
  void training_over(job_clock::time_point now);

  bool has_reports_for(std::int32_t epoch) const { return epochs_.count(epoch) > 0; }

  // Epoch e's summary as far as the members' reports go (throughput, loss, bubble); the
  // next epoch's throughput is measured from now.
  epoch_summary open_summary(std::int32_t e, std::uint32_t live, job_clock::time_point now);
  // Adds the staleness of the gradients applied since the previous close.
  void add_staleness(epoch_summary& s, const staleness_totals& t);
  // The last epoch's evaluation, for the result.
  void record_final(const epoch_summary& s);
  // Note [Accuracy at chance] (train/chance_watch.hpp): the operator's warning when an
  // evaluated epoch is at chance for `classes` with a finite training loss; the first
  // such epoch goes in the result (accuracy_at_chance_epoch).
  std::optional<std::string> check_accuracy(const epoch_summary& s, std::int64_t classes);

  job_result result(const staleness_totals& t, std::int64_t workers_lost, tensor params) const;

 private:
  struct epoch_sums {
    double loss_sum = 0.0;
    std::int64_t steps = 0, samples = 0;
  };
  job_spec job_;
  std::map<std::int32_t, epoch_sums> epochs_;
  std::optional<bubble_meter> bubble_;              // pipelines only
  std::vector<std::int32_t> peak_stored_;           // per stage, over the replicas that finished
  std::int64_t bytes_pushed_ = 0, steps_done_ = 0;  // over the members that finished
  bool started_ = false;
  job_clock::time_point t_start_, t_end_, epoch_start_;
  std::int64_t samples_ = 0;          // computed, as the members reported them
  std::int64_t samples_dropped_ = 0;  // of those, whose gradient a shard dropped as late
  std::optional<std::pair<job_clock::time_point, std::int64_t>> first_done_;  // when, samples by then
  staleness_totals at_last_close_;
  bool final_evaluated_ = false;
  double final_accuracy_ = 0.0, final_loss_ = 0.0;
  chance_watch chance_;                                  // over the evaluated epochs so far
  std::int64_t resumed_step_ = -1, trained_before_ = 0;  // per worker, before the resumed clock
  std::int64_t steps_replayed_ = -1;                     // -1: not resumed, or not known
  std::int64_t restarts_in_place_ = 0;
};

}  // namespace troupe
