// stage_checkpoints: a member that holds the parameters (--mode allreduce, --servers 0)
// and its checkpoints (Note [Members' checkpoints] in core/member_checkpoint.cpp): each
// file written on the member's writer thread, the word to the coordinator, which
// completes the checkpoint once every stage's file is written, and a finishing member
// that waits for its last file.
#include <spdlog/spdlog.h>

#include "actors/checkpoint_writes.hpp"
#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

void save_checkpoint(stage_pointer self, member_actions::save_checkpoint& c) {
  auto& st = self->state;
  const auto& job = st.core->place().job;
  if (!st.writer) st.writer = std::make_unique<serial_worker>(static_cast<std::size_t>(job.checkpoints.queue));
  const checkpoint_store store(job.checkpoints.dir, job.checkpoints.keep);
  ++st.checkpoints_writing;
  if (!post_checkpoint_file(*st.writer, store, caf::actor_cast<caf::actor_addr>(self), c.image, c.saved, c.id))
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
