// member_core, part 5: checkpoints of a job whose members hold the parameters (--mode
// allreduce, --servers 0): when replica 0's stages take one, and the state a resumed
// job's members start from (Note [Members' checkpoints]); and in a sync job with 2-bit
// pushes, each member's residuals (Note [Residuals in checkpoints] in
// core/residual_checkpoint.hpp).
#include <utility>

#include "core/checkpoint_store.hpp"
#include "core/job.hpp"
#include "core/key_table.hpp"
#include "core/member_core.hpp"
#include "core/residual_checkpoint.hpp"
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
// The steps are those of Note [Checkpoint steps] in core/shard_core_checkpoints.cpp:
// multiples of --checkpoint-every, every epoch's end (the job's last step among them), and the steps
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
  if ((writes_checkpoints() || writes_residuals()) && step > time_.clock()) checkpoints_.request(step);
}

// The steps of Note [Checkpoint steps], each once. A member asks at every step it
// computes and writes the state it holds then, so only `step` itself will do: one due
// earlier (a step skipped, Note [Backup workers]) is passed over.
bool member_core::checkpoint_due(std::int64_t step) {
  const auto due = checkpoints_.take_due(step);
  return due && *due == step;
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
  return std::nullopt;  // the resumed clock counts as taken already (build)
}

// Called once the step that brought the clock to where it is is applied.
void member_core::maybe_checkpoint(member_actions_list& out) {
  if (!writes_checkpoints()) return;
  const std::int64_t step = time_.clock();
  if (!checkpoint_due(step)) return;
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

bool member_core::writes_residuals() const {
  return keeps_residuals(place_.job) && !simulated() && !slices_.active().empty();
}

// The file is written here, on the member's thread, before the push actions this call
// returns leave: that order is what puts it in the checkpoint (Note [Residuals in
// checkpoints]). It costs one write of the stage's floats per checkpoint.
void member_core::save_residuals_if_due(member_actions_list& out) {
  const std::int64_t step = time_.clock() + 1;  // what this step's pushes complete
  if (!writes_residuals() || !checkpoint_due(step)) return;
  const job_spec& job = place_.job;
  residual_image image{place_.rank, step, members(job), tensor({net_->num_params()})};
  for (std::uint32_t s : slices_.active()) unpack_shard(image.residual, pushes_.residual(s), slices_.ranges(s));
  const checkpoint_store store(job.checkpoints.dir, job.checkpoints.keep);
  auto dir = store.begin(step);
  auto why = dir ? write_residual_image(*dir / residual_file_name(place_.rank), image, checkpoint_id_)
                 : std::optional<std::string>(dir.error().message);
  if (why)
    out.push_back(warn{who() + " could not write its 2-bit residuals for checkpoint " + std::to_string(step) + " (" +
                       *why + "); a job resumed from that checkpoint starts them at zero"});
}

void member_core::restore_residuals(member_actions_list& out) {
  const shard_resume& r = place_.resume;
  if (r.dir.empty() || !writes_residuals()) return;
  const std::filesystem::path path = std::filesystem::path(r.dir) / residual_file_name(place_.rank);
  const std::string zero = who() + " starts its 2-bit residuals at zero, so its first pushes differ from the "
                                   "uninterrupted run's: ";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    out.push_back(warn{zero + r.dir + " holds no " + residual_file_name(place_.rank) +
                       " (a checkpoint taken without 2-bit pushes, or a step named after this member's push)"});
    return;
  }
  auto image = read_residual_image(path, checkpoint_id_);
  if (!image) {
    out.push_back(warn{zero + image.error().message});
    return;
  }
  const std::uint32_t n = members(place_.job);
  if (image->rank != place_.rank || image->members != n || image->step != time_.clock()) {
    out.push_back(warn{zero + path.string() + " was written by member " + std::to_string(image->rank) + " of " +
                       std::to_string(image->members) + " at step " + std::to_string(image->step) +
                       ", and this is member " + std::to_string(place_.rank) + " of " + std::to_string(n) +
                       " resuming at step " + std::to_string(time_.clock())});
    return;
  }
  if (image->residual.numel() != net_->num_params()) {
    out.push_back(warn{zero + path.string() + " holds " + std::to_string(image->residual.numel()) +
                       " floats, and this member's stage has " + std::to_string(net_->num_params())});
    return;
  }
  for (std::uint32_t s : slices_.active()) pack_shard(pushes_.residual(s), image->residual, slices_.ranges(s));
}

}  // namespace troupe
