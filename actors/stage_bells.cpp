// stage_bells: the stage shell's doorbells (Note [Doorbells] in transport/doorbell.hpp),
// kept by actors/member_bells: made at the member's first call through one, with its
// actor's nudge and deadline; a push or a pull through the bell block of the channel
// whose slot it lent; and a detached member waiting for its answers on its own thread
// (Note [Waiting for the answers] in actors/member_bells.cpp).
#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

member_bells& bells_of(stage_pointer self) {
  auto& st = self->state;
  if (!st.bells) st.bells = bells_of_actor(self, who(self), request_timeout(self));
  return *st.bells;
}

// The bell block of `channel` to shard s, when the member rings doorbells at all.
std::optional<shm::bell_block> bell_of(stage_pointer self, std::uint32_t s, std::optional<std::size_t> channel) {
  if (!self->state.opts.doorbells || !channel) return std::nullopt;
  return self->state.links->bell(s, *channel);
}

}  // namespace

bool ring_pull(stage_pointer self, std::uint32_t s, const kv_pull& r, std::function<void(kv_pull_reply&)> ok,
               std::function<void(caf::error&)> failed) {
  const auto& pulls = self->state.slots.pulls;
  auto bell = bell_of(self, s, s < pulls.size() ? pulls[s].reply_channel() : std::nullopt);
  return bell && bells_of(self).post_pull(s, bell, r, {std::move(ok), nullptr, std::move(failed)});
}

bool ring_push(stage_pointer self, std::uint32_t s, const kv_push& g, std::function<void(kv_push_ack&)> ok,
               std::function<void(caf::error&)> failed) {
  const auto& pushes = self->state.slots.pushes;
  auto bell = bell_of(self, s, s < pushes.size() ? pushes[s].push_channel() : std::nullopt);
  return bell && bells_of(self).post_push(s, bell, g, {nullptr, std::move(ok), std::move(failed)});
}

void on_bells_answered(stage_pointer self) {
  if (!self->state.bells) return;
  self->state.bells->on_answered();
  await_answers(self);  // a nudge that finds what this thread took itself still waits
}

void await_answers(stage_pointer self) {
  auto& st = self->state;
  if (!st.opts.detached || !st.bells) return;
  st.bells->await([self] { return self->mailbox().empty(); }, [self] { self->send(self, bells_answered{}); });
}

void ring_bells(stage_pointer self) {
  if (self->state.bells) self->state.bells->ring();
}

void on_bell_deadline(stage_pointer self) {
  if (self->state.bells) self->state.bells->on_deadline();
}

}  // namespace troupe::stage_shell
