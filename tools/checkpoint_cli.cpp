// checkpoint_cli: the checkpoint flags and resuming a job from the command line.
#include "tools/checkpoint_cli.hpp"

#include <filesystem>
#include <iostream>

#include "core/loss_record.hpp"

namespace troupe::cli {

void add_checkpoint_options(CLI::App& app, checkpoint_plan& plan, std::string& resume, const char* group) {
  app.add_option_function<std::string>(
         "--on-shard-loss",
         [&plan](const std::string& v) {
           auto p = parse_shard_loss(v);
           if (!p) throw CLI::ValidationError(p.error().message);
           plan.on_shard_loss = *p;
         },
         "When a shard server dies: recover (a replacement restores its state from the newest checkpoint once it "
         "has joined, launch starting one; a training job restarts in place, a key-value job's loops go on), fail "
         "(the job ends; under launch with --max-restarts every process starts again from the newest checkpoint: an "
         "exact rollback, users' loops going on from kv.resumed_step), or auto (default: recover with "
         "--checkpoint-dir)")
      ->group(group);
  app.add_option("--checkpoint-dir", plan.dir,
                 "Write checkpoints to DIR at every epoch's end (and every --checkpoint-every steps): each shard "
                 "server's slice and optimizer state, the job's state, a manifest; every shard server must reach DIR "
                 "(one host, or a shared file system)")
      ->group(group);
  app.add_option("--checkpoint-every", plan.every, "Also checkpoint every N steps (0: only at epoch ends)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str()
      ->group(group);
  app.add_option("--checkpoint-seconds", plan.seconds,
                 "Also checkpoint about every S seconds (the coordinator names a step just ahead of the fastest "
                 "worker; 0: off)")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str()
      ->group(group);
  app.add_option("--keep-checkpoints", plan.keep, "Complete checkpoints to keep; older ones are removed")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str()
      ->group(group);
  app.add_option("--checkpoint-queue", plan.queue,
                 "Checkpoints that may wait in memory (each a copy of the parameters and optimizer state that a shard "
                 "or member writes) while the disk writes an earlier one; a checkpoint due when they are all taken is "
                 "skipped, counted and warned about")
      ->check(CLI::Range(1, 1 << 10))
      ->capture_default_str()
      ->group(group);
  app.add_flag("--checkpoint-fatal", plan.fatal,
               "End the job when a checkpoint cannot be written (default: warn, count it, and train on)")
      ->group(group);
  app.add_option("--resume", resume,
                 "Continue the job whose checkpoints are in DIR from its newest good one (the same job id; checkpoints "
                 "go on into DIR unless --checkpoint-dir says otherwise)")
      ->group(group);
}

std::optional<std::string> adopt_checkpointed_job(job_spec& job, const std::string& resume) {
  if (!job.checkpoints.dir.empty()) job.checkpoints.dir = std::filesystem::absolute(job.checkpoints.dir).string();
  if (resume.empty()) {
    if (job.checkpoints.on_shard_loss == shard_loss::recover && job.checkpoints.dir.empty())
      return "--on-shard-loss recover restarts the job from its newest checkpoint; give --checkpoint-dir DIR";
    return std::nullopt;
  }
  const std::string dir = std::filesystem::absolute(resume).string();
  auto id = checkpointed_job_id(dir);
  if (!id) return "--resume " + resume + ": " + id.error().message;
  if (!job.job_id.empty() && job.job_id != *id)
    return "--resume " + resume + " continues job '" + *id + "', but this job is '" + job.job_id +
           "'; give it --job-id " + *id + " (every node of a cluster), or leave --job-id out";
  job.job_id = *id;
  if (job.checkpoints.dir.empty()) job.checkpoints.dir = dir;
  return std::nullopt;
}

expected<std::optional<resume_point>> resume_point_for(const job_spec& job, const model& m, const std::string& resume) {
  const std::string dir = resume.empty() ? std::string() : std::filesystem::absolute(resume).string();
  if (!job.checkpoints.dir.empty() && job.checkpoints.dir != dir) {
    const auto held = checkpoint_store(job.checkpoints.dir, 1).complete();
    if (!held.empty())
      return failure{"--checkpoint-dir " + job.checkpoints.dir + " already holds checkpoints (the newest of step " +
                     std::to_string(held.front()) + "); pass --resume " + job.checkpoints.dir +
                     " to continue that job, or choose an empty directory"};
  }
  if (dir.empty()) return std::optional<resume_point>();
  auto r = find_resume(dir, job, m.num_params());
  if (!r) return failure{"--resume " + resume + ": " + r.error().message};
  for (const auto& why : r->skipped) std::cerr << "warning: --resume passed over " << why << "\n";
  // Note [Steps replayed]: the record of a lost run is read once, then removed.
  auto taken = take_loss_record(dir, job.job_id, r->step);
  r->steps_replayed = taken.steps_replayed;
  for (const auto& why : taken.warnings) std::cerr << "warning: " << why << "\n";
  std::cerr << "resuming job " << job.job_id << " from checkpoint " << r->step << " in " << dir << " (the workers go on "
            << "from step " << r->clock << ")";
  if (r->steps_replayed) std::cerr << "; it repeats " << *r->steps_replayed << " steps that the lost run had taken";
  std::cerr << "\n";
  return std::optional<resume_point>(std::move(*r));
}

}  // namespace troupe::cli
