// shard_for: the shard core a welcome describes: a training job's, its ranges of the model
// initialised from the job's seed with the job's mode, rules, optimizer and checkpoint
// plan; or a key-value job's, empty until the coordinator defines its keys' parts.
#include "core/shard_for.hpp"

#include "core/job_frames.hpp"

namespace troupe {

shard_config kv_shard_config(const shard_welcome& w) {
  shard_config cfg;
  cfg.index = w.index;
  cfg.mode = w.job.mode;
  cfg.staleness = w.job.staleness;
  cfg.staleness_lr = w.job.staleness_lr;
  cfg.rule = w.job.async_correction;
  cfg.dc_lambda = w.job.dc_lambda;
  cfg.rule_keeps_lr = true;
  cfg.backup_workers = w.job.backup_workers;
  cfg.has_optimizer = false;                                                           // until a member sets one
  if (!w.job.checkpoints.dir.empty()) cfg.checkpoint_every = w.job.checkpoints.every;  // Note [Key-value checkpoints]
  return cfg;
}

expected<built_shard> shard_for(const shard_welcome& w) {
  auto m = build_model(w.job);
  if (!m) return m.error();
  const std::uint64_t frame_bytes = max_frame_bytes(w.job, *m);
  tensor full({m->num_params()});
  m->init_params(full, w.job.train.seed, w.job.train.init);
  std::int64_t numel = 0;
  for (const auto& r : w.ranges) numel += r.length;
  tensor mine({numel});
  pack_shard(mine, full, w.ranges);
  shard_config cfg;
  cfg.index = w.index;
  if (w.job.pipeline_stages > 1) cfg.stage_slices = shard_stage_slices(w.ranges, job_stage_spans(w.job, *m));
  cfg.mode = w.job.mode;
  cfg.staleness = w.job.staleness;
  cfg.staleness_lr = w.job.staleness_lr;
  cfg.rule = w.job.async_correction;
  cfg.dc_lambda = w.job.dc_lambda;
  cfg.backup_workers = w.job.backup_workers;
  cfg.optimizer = w.job.train.optimizer;
  cfg.schedule = job_schedule(w.job);
  cfg.ranges = w.ranges;
  if (!w.job.checkpoints.dir.empty()) {
    cfg.checkpoint_every = w.job.checkpoints.every;
    cfg.checkpoint_epoch_steps = steps_per_epoch(w.job);
  }
  return built_shard{std::make_unique<shard_core>(cfg, std::move(mine)), frame_bytes};
}

}  // namespace troupe
