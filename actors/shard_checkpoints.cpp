// shard_checkpoints: a training job's shard server and its checkpoints: the state a
// resumed job starts from, each checkpoint's image taken on the actor's thread when the
// core makes it due and written by the shard's writer thread, and the word to the
// coordinator, which completes the checkpoint once every shard's file is written.
#include <spdlog/spdlog.h>

#include "actors/checkpoint_writes.hpp"
#include "actors/shard_state.hpp"
#include "core/checkpoint_store.hpp"
#include "core/job_checkpoint.hpp"

namespace troupe::shard_shell {

namespace {

expected<shard_image> state_for(const shard_welcome& w, const checkpoint_identity& id) {
  // The same key table: this shard's own file holds exactly its ranges.
  const bool same_table = w.resume.files.size() == w.job.servers;
  return image_for(w.resume.dir, w.resume.files, same_table ? std::optional<std::size_t>(w.index) : std::nullopt,
                   w.ranges, id);
}

}  // namespace

std::optional<std::string> plan_checkpoints(shard_pointer self, const shard_welcome& w) {
  auto& st = self->state;
  auto m = build_model(w.job);
  if (!m) return m.error().message;
  st.checkpoint_id = identity_of(w.job, m->num_params());
  st.checkpoints = w.job.checkpoints;
  if (!st.checkpoints.dir.empty())
    st.writer = std::make_unique<serial_worker>(static_cast<std::size_t>(st.checkpoints.queue));
  if (!w.resume.dir.empty()) st.resume = w;
  return std::nullopt;
}

std::optional<std::string> restore_checkpoint(shard_pointer self) {
  auto& st = self->state;
  if (!st.resume) return std::nullopt;
  const shard_welcome w = std::move(*st.resume);
  st.resume.reset();
  auto image = state_for(w, st.checkpoint_id);
  if (!image) return "cannot resume from " + w.resume.dir + ": " + image.error().message;
  if (auto wrong = st.core->restore(*image, w.resume.clock))
    return "cannot resume from " + w.resume.dir + ": " + *wrong;
  spdlog::info("shard {}: resumed from {} at clock {} (version {})", st.index, w.resume.dir, w.resume.clock,
               st.core->version());
  return std::nullopt;
}

void maybe_checkpoint(shard_pointer self) {
  auto& st = self->state;
  if (!st.core || !st.writer) return;
  const auto step = st.core->take_checkpoint_due();
  if (!step) return;
  auto image = std::make_shared<const shard_image>(st.core->image(*step));
  checkpoint_saved saved{st.index, *step, image->version, shard_file_name(st.index), {}};
  const checkpoint_store store(st.checkpoints.dir, st.checkpoints.keep);
  if (!post_checkpoint_file(*st.writer, store, caf::actor_cast<caf::actor_addr>(self), image, saved, st.checkpoint_id))
    on_checkpoint_written(self, saved);
}

void on_checkpoint_written(shard_pointer self, const checkpoint_saved& s) {
  auto& st = self->state;
  if (s.error.empty())
    spdlog::info("shard {}: wrote its part of checkpoint {}", st.index, s.step);
  else
    spdlog::warn("shard {}: checkpoint {}: {}", st.index, s.step, s.error);
  self->send(st.coordinator, checkpoint_atom::value, s);
}

}  // namespace troupe::shard_shell
