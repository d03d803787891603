// shard_checkpoints: a shard server and its checkpoints, in every kind of job: the state a
// resumed job starts from (a training job's slice, resharded when the key table changed;
// a key-value job's parts, Note [Key-value checkpoints]), each checkpoint's image taken on
// the actor's thread when the core makes it due and written by the shard's writer thread,
// and the word to the coordinator, which completes the checkpoint once every shard's file
// is written.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "actors/checkpoint_writes.hpp"
#include "actors/shard_state.hpp"
#include "core/checkpoint_store.hpp"
#include "core/job_checkpoint.hpp"
#include "core/kv_checkpoint.hpp"

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
  if (w.job.kv) {
    st.checkpoint_id = identity_of(w.job, 0);
  } else {
    auto m = build_model(w.job);
    if (!m) return m.error().message;
    st.checkpoint_id = identity_of(w.job, m->num_params());
  }
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
  if (w.job.kv) {
    if (w.index >= w.resume.files.size())
      return "cannot resume from " + w.resume.dir + ": it holds no file for shard " + std::to_string(w.index);
    auto parts = read_kv_shard_image(std::filesystem::path(w.resume.dir) / w.resume.files[w.index], st.checkpoint_id);
    if (!parts) return "cannot resume from " + w.resume.dir + ": " + parts.error().message;
    if (auto wrong = st.core->restore_parts(*parts)) return "cannot resume from " + w.resume.dir + ": " + *wrong;
    spdlog::info("shard {}: resumed {} key parts from {} at step {}", st.index, parts->parts.size(), w.resume.dir,
                 w.resume.clock);
    return std::nullopt;
  }
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
  const checkpoint_store store(st.checkpoints.dir, st.checkpoints.keep);
  const auto owner = caf::actor_cast<caf::actor_addr>(self);
  if (!st.core->training()) {  // Note [Key-value checkpoints]
    // Note [The last checkpoints of a key-value job]: said before the file is written, so
    // a job whose last member leaves meanwhile waits for it.
    self->send(st.coordinator, checkpoint_atom::value, checkpoint_begun{st.index, *step});
    auto parts = std::make_shared<const kv_shard_image>(st.core->parts_image(*step));
    checkpoint_saved saved{st.index, *step, *step, kv_shard_file_name(st.index), {}};
    auto write = [parts, id = st.checkpoint_id](const std::filesystem::path& at) {
      return write_kv_shard_image(at, *parts, id);
    };
    if (!post_checkpoint_file(*st.writer, store, owner, write, saved)) on_checkpoint_written(self, saved);
    return;
  }
  auto image = std::make_shared<const shard_image>(st.core->image(*step));
  checkpoint_saved saved{st.index, *step, image->version, shard_file_name(st.index), {}};
  if (!post_checkpoint_file(*st.writer, store, owner, image, saved, st.checkpoint_id)) on_checkpoint_written(self, saved);
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
