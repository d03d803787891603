// job_output: a job's output for the operator (declared in tools/job_cli.hpp): a line per
// epoch on stderr and the final JSON line on stdout.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "base/fingerprint.hpp"
#include "tools/job_cli.hpp"

namespace troupe::cli {

void print_epoch(const epoch_summary& s, bool per_character) {
  if (s.trained)
    std::fprintf(stderr, "epoch %d/%d: %.0f samples/s, train loss %.4f, staleness %.2f (max %lld)", s.epoch + 1,
                 s.epochs, s.samples_per_second, s.train_loss, s.mean_staleness,
                 static_cast<long long>(s.max_staleness));
  else  // Note [A shard lost after training] (core/job_epochs.cpp)
    std::fprintf(stderr, "epoch %d/%d: evaluated again from the end checkpoint", s.epoch + 1, s.epochs);
  if (s.evaluated) std::fprintf(stderr, ", test accuracy %.2f%% (loss %.4f)", 100.0 * s.test_accuracy, s.test_loss);
  if (s.evaluated && per_character)
    std::fprintf(stderr, ", validation %.3f bits per character", bits_per_char(s.test_loss));
  if (s.pipeline_stages > 1)
    std::fprintf(stderr, ", bubble %.1f%% (theory %.1f%% for K=%u, M=%d), %u stages live", 100.0 * s.bubble,
                 100.0 * s.theoretical_bubble, s.pipeline_stages, s.microbatches, s.live_workers);
  else
    std::fprintf(stderr, ", %u workers", s.live_workers);
  std::fprintf(stderr, ", %.1f s\n", s.seconds);
  std::fflush(stderr);
}

void print_job_result(const job_result& r, const std::string& who, const text_output* text,
                      std::string_view precision) {
  nlohmann::ordered_json out;
  out["mode"] = r.mode;
  out["workers"] = r.workers;
  out["servers"] = r.servers;
  out["epochs"] = r.epochs;
  out["test_accuracy"] = r.evaluated ? nlohmann::ordered_json(round_to(r.test_accuracy, 4)) : nullptr;
  // The first epoch (1-based) whose test accuracy was at chance (Note [Accuracy at chance]).
  out["accuracy_at_chance_epoch"] =
      r.accuracy_at_chance_epoch >= 0 ? nlohmann::ordered_json(r.accuracy_at_chance_epoch + 1) : nullptr;
  out["train_seconds"] = round_to(r.train_seconds, 3);
  out["samples_per_second"] = round_to(r.samples_per_second, 1);
  out["steady_samples_per_second"] = round_to(r.steady_samples_per_second, 1);
  out["mean_staleness"] = round_to(r.mean_staleness, 3);
  out["max_staleness"] = r.max_staleness;
  if (!precision.empty()) out["precision"] = std::string(precision);
  if (r.pipeline_stages > 1) {
    out["pipeline_stages"] = r.pipeline_stages;
    out["microbatches"] = r.microbatches;
    out["bubble"] = round_to(r.bubble, 4);
    out["peak_stored"] = r.peak_stored;
  }
  out["push_bytes_per_step"] = round_to(r.push_bytes_per_step, 1);
  out["samples_trained"] = r.samples;
  out["samples_planned"] = r.samples_planned;
  out["samples_dropped_late"] = r.samples_dropped;
  out["samples_redealt"] = r.samples_redealt;
  out["workers_lost"] = r.workers_lost;
  out["rejected_messages"] = r.rejected;
  // Note [Resuming a job]: the checkpoint this run went on from (null: a fresh start).
  out["resumed_from_step"] = r.resumed_from_step >= 0 ? nlohmann::ordered_json(r.resumed_from_step) : nullptr;
  // Note [Steps replayed]: of the lost run's steps, those this run repeats (null: not known).
  out["steps_replayed"] = r.steps_replayed >= 0 ? nlohmann::ordered_json(r.steps_replayed) : nullptr;
  // Note [Restarting in place] (actors/coordinator_restart.cpp): restarts after a lost shard server.
  out["restarts_in_place"] = r.restarts_in_place;
  out["checkpoints_written"] = r.checkpoints_written;
  out["checkpoints_failed"] = r.checkpoints_failed;
  // The final parameters' bytes, so two runs compare bitwise (null with --simulate-compute).
  const bool have_params = r.evaluated && r.params.numel() > 0 && r.params.bytes() != nullptr;
  out["params_fnv1a"] = have_params ? nlohmann::ordered_json(hex64(fnv1a64(r.params.bytes(), r.params.nbytes())))
                                    : nlohmann::ordered_json(nullptr);
  if (text && have_params) add_text_output(out, who, r.test_loss, r.params, *text);
  std::cout << out.dump() << std::endl;
}

void print_kv_job_result(const job_result& r) {
  nlohmann::ordered_json out;
  out["mode"] = r.mode;
  out["workers"] = r.workers;
  out["servers"] = r.servers;
  out["train_seconds"] = round_to(r.train_seconds, 3);
  out["workers_lost"] = r.workers_lost;
  // Note [Replacing a key-value shard] (core/job_shard_replacement.cpp): shards replaced.
  out["restarts_in_place"] = r.restarts_in_place;
  std::cout << out.dump() << std::endl;
}

}  // namespace troupe::cli
