// member_core, part 5: checkpoints of a job whose members hold the parameters (--mode
// allreduce, --servers 0): when replica 0's stages take one, and the state a resumed
// job's members start from (Note [Members' checkpoints]).
#include <utility>

#include "core/job.hpp"
#include "core/member_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

using namespace member_actions;

// Note [Members' checkpoints]
// A job with no shard servers keeps its parameters and the optimizer's state in its
// members, and the replicas of --mode allreduce hold the same bits after every step
// (Note [Ring all-reduce of gradients] in core/member_ring.cpp). So stage i of replica 0
// speaks for every replica, as it does with its epoch reports: it writes stage-<i>.tf,
// the same file a shard writes (Note [Shard checkpoints] in core/shard_checkpoint.hpp)
// for the one range [its first float, + its stage's floats) of the model's flat vector,
// with the step as its version. The coordinator completes the checkpoint once every
// stage's file is written, as it does with shards' files (job.tf, then the manifest).
// The steps are those of Note [Checkpoint steps] in core/shard_core.hpp: multiples of
// --checkpoint-every, every epoch's end (the job's last step among them), and the steps
// the coordinator names with --checkpoint-seconds. A member has finished step S when it
// has applied S updates, and every replica has applied the same S updates, so the
// checkpoint is a state the whole job passed through, in every mode.
// Resuming, each member of every replica restores its stage's range from the
// checkpoint's files, resharded when they were cut otherwise (a checkpoint of another
// pipeline cut, or a shard servers' one: the files tile the same flat vector), and goes
// on from the resumed clock; with the same workers, batch size and data the run is
// bitwise the uninterrupted one, as in sync (Note [Resuming a job] in
// core/job_checkpoint.hpp).

bool member_core::writes_checkpoints() const {
  return local_opt_.has_value() && replica_ == 0 && !place_.job.checkpoints.dir.empty() && !simulated();
}

void member_core::on_checkpoint_request(std::int64_t step) {
  if (writes_checkpoints() && step > clock_ && step > last_checkpoint_) requested_checkpoints_.insert(step);
}

std::optional<fault> member_core::restore_checkpoint() {
  const shard_resume& r = place_.resume;
  if (!local_opt_ || r.dir.empty()) return std::nullopt;
  const std::string from = who() + " cannot resume from " + r.dir + ": ";
  const key_range mine{0, 0, param_offset_, net_->num_params()};
  auto image = image_for(r.dir, r.files, std::optional<std::size_t>(stage_), {mine}, checkpoint_id_);
  if (!image) return fault{errc::checkpoint_failed, from + image.error().message};
  if (auto wrong = local_opt_->restore(image->optimizer_steps, image->slot1, image->slot2))
    return fault{errc::checkpoint_failed, from + *wrong};
  if (auto f = catch_compute(who() + ": restoring its parameters", [&] {
        copy(rep_->params(), image->params);
        rep_->commit_params();
      }))
    return f;
  return std::nullopt;  // last_checkpoint_ is the resumed clock already (build)
}

// Called once the step that brought the clock to clock_ is applied.
void member_core::maybe_checkpoint(member_actions_list& out) {
  if (!writes_checkpoints()) return;
  const std::int64_t step = clock_, every = place_.job.checkpoints.every;
  while (!requested_checkpoints_.empty() && *requested_checkpoints_.begin() < step)
    requested_checkpoints_.erase(requested_checkpoints_.begin());
  bool due = step % std::max<std::int64_t>(1, steps_per_epoch_) == 0 || (every > 0 && step % every == 0);
  if (requested_checkpoints_.erase(step) > 0) due = true;
  if (!due || step <= last_checkpoint_) return;
  last_checkpoint_ = step;
  auto image = std::make_shared<shard_image>();
  image->shard = stage_;
  image->step = image->version = step;
  image->ranges = {{param_offset_, net_->num_params()}};
  image->params = rep_->params();
  image->slot1 = local_opt_->slot(0);
  image->slot2 = local_opt_->slot(1);
  image->optimizer_steps = local_opt_->steps();
  checkpoint_saved saved{stage_, step, step, "stage-" + std::to_string(stage_) + ".tf", {}};
  out.push_back(save_checkpoint{std::move(image), std::move(saved), checkpoint_id_});
}

}  // namespace troupe
