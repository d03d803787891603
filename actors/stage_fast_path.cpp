// stage_fast_path: a member's ends of the same-host fast path to its shards (Note
// [Same-host fast path] in core/shared_slots.hpp): which channel a pull or push may use,
// and giving its slots back when the request is answered.
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

// The channel to shard s, created at its first use; nullptr when there is none.
shm::shard_channel* channel_to(stage_pointer self, std::uint32_t s) {
  auto& st = self->state;
  if (st.opts.fast_path_tag.empty() || s >= st.shards.size() || !st.shards[s]) return nullptr;
  if (st.fast_paths.size() < st.shards.size()) st.fast_paths.resize(st.shards.size());
  auto& fp = st.fast_paths[s];
  if (!fp.tried) {
    fp.tried = true;
    // In one process the message already shares the tensor; nothing to gain.
    if (st.shards[s].node() == self->node()) return nullptr;
    auto made = shm::shard_channel::create(st.opts.fast_path_tag, shm::slot_bytes_for(st.core->slice_numel(s)),
                                           st.core->place().rank);
    if (!made) {
      spdlog::warn("{}: no shared-memory channel to shard {} ({}); its tensors go over the network", who(self), s,
                   made.error().message);
      return nullptr;
    }
    fp.channel = std::move(*made);
  }
  return fp.channel ? &*fp.channel : nullptr;
}

// Drops a channel that can no longer be used (declined or timed out); its name goes with it.
void close_channel(stage_pointer self, std::uint32_t s, const char* why) {
  auto& fp = self->state.fast_paths[s];
  if (!fp.channel) return;
  spdlog::info("{}: closes its shared-memory channel to shard {} ({}); its tensors go over the network", who(self), s,
               why);
  fp.channel.reset();
}

}  // namespace

bool offer_reply_slot(stage_pointer self, std::uint32_t s, pull_request& r) {
  auto* ch = channel_to(self, s);
  if (!ch) return false;
  auto slot = ch->lend_reply_slot();
  if (!slot) return false;
  r.reply_to = std::move(*slot);
  return true;
}

expected<bool> take_shared_reply(stage_pointer self, std::uint32_t s, params_reply& p) {
  auto* ch = channel_to(self, s);
  if (!ch) return failure{"shard " + std::to_string(s) + " answered in shared memory that this member did not offer"};
  const bool was_confirmed = ch->confirmed();
  auto t = ch->take_reply(p.shared);
  if (!t) return t.error();
  if (!was_confirmed)
    spdlog::info("{}: exchanges tensors with shard {} through shared memory ({})", who(self), s, ch->name());
  p.params = std::move(*t);
  p.shared = {};
  return true;
}

void settle_reply_slot(stage_pointer self, std::uint32_t s, bool answered_inline, bool timed_out) {
  auto* ch = channel_to(self, s);
  if (!ch) return;
  ch->reply_failed(timed_out);
  if (timed_out)
    close_channel(self, s, "a pull timed out, so the shard may still write its slot");
  else if (answered_inline && !ch->confirmed())
    close_channel(self, s, "the shard could not map it: another host, or shared memory unavailable there");
}

tensor push_buffer(stage_pointer self, std::uint32_t s, std::int64_t numel) {
  auto* ch = channel_to(self, s);
  if (!ch) return {};
  auto buffer = ch->lend_push_buffer(numel);
  return buffer ? std::move(*buffer) : tensor();
}

bool share_push(stage_pointer self, std::uint32_t s, push_grads& g) {
  auto* ch = channel_to(self, s);
  auto where = ch ? ch->put_push(g.grad) : std::nullopt;
  if (!where) {
    // A slot buffer that cannot be sent from its slot travels as a copy: the mapping
    // may be gone before the message is serialized.
    if (ch && ch->holds(g.grad.bytes())) g.grad = tensor(g.grad);
    return false;
  }
  g.shared = std::move(*where);
  g.grad = tensor();
  return true;
}

void settle_push_slot(stage_pointer self, std::uint32_t s, bool timed_out) {
  auto* ch = channel_to(self, s);
  if (!ch) return;
  ch->push_settled(timed_out);
  if (timed_out) close_channel(self, s, "a push timed out, so the shard may still read its slot");
}

}  // namespace troupe::stage_shell
