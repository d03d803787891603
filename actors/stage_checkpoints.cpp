// stage_checkpoints: a member that holds the parameters (--mode allreduce, --servers 0)
// and its checkpoints (Note [Members' checkpoints] in core/member_checkpoint.cpp): each
// file written on the member's writer thread, the word to the coordinator, which
// completes the checkpoint once every stage's file is written, and a finishing member
// that waits for its last file.
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"
#include "actors/thread_mail.hpp"
#include "core/checkpoint_store.hpp"

namespace troupe::stage_shell {

namespace {

// At most this many images wait behind the one being written; a later one is skipped
// (and reported), so a disk slower than the checkpoints cannot pile up memory.
constexpr std::size_t images_waiting = 2;

}  // namespace

void save_checkpoint(stage_pointer self, member_actions::save_checkpoint& c) {
  auto& st = self->state;
  const auto& job = st.core->place().job;
  if (!st.writer) st.writer = std::make_unique<serial_worker>(images_waiting);
  const checkpoint_store store(job.checkpoints.dir, job.checkpoints.keep);
  auto tell = thread_mail(caf::actor_cast<caf::actor_addr>(self));
  const bool queued = st.writer->post([=, image = c.image, saved = c.saved, id = c.id]() mutable {
    if (auto d = store.begin(saved.step); !d)
      saved.error = d.error().message;
    else if (auto why = write_shard_image(*d / saved.file, *image, id))
      saved.error = *why;
    tell(checkpoint_written{std::move(saved)});
  });
  if (queued) {
    ++st.checkpoints_writing;
    return;
  }
  c.saved.error = "skipped: " + std::to_string(images_waiting + 1) +
                  " earlier checkpoints are still being written (the disk is slower than --checkpoint-every)";
  ++st.checkpoints_writing;
  on_checkpoint_written(self, c.saved);
}

void on_checkpoint_written(stage_pointer self, const checkpoint_saved& s) {
  auto& st = self->state;
  if (s.error.empty())
    spdlog::info("{}: wrote its part of checkpoint {}", who(self), s.step);
  else
    spdlog::warn("{}: checkpoint {}: {}", who(self), s.step, s.error);
  self->send(st.coordinator, checkpoint_atom::value, s);
  if (st.checkpoints_writing > 0 && --st.checkpoints_writing == 0 && st.once_written)
    std::exchange(st.once_written, nullptr)();
}

void on_checkpoint_request(stage_pointer self, std::int64_t step) {
  if (!from_the_coordinator(self, "a checkpoint request")) return;
  if (self->state.core->phase() != member_phase::joining) self->state.core->on_checkpoint_request(step);
}

void after_checkpoints(stage_pointer self, std::function<void()> then) {
  auto& st = self->state;
  if (st.checkpoints_writing == 0) {
    then();
    return;
  }
  st.once_written = std::move(then);
}

}  // namespace troupe::stage_shell
