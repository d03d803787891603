// stage_fast_path: a member's ends of the same-host fast path to its shards (Note
// [Same-host fast path] in transport/shared_slots.hpp), through the channel pool every kind of
// member uses (transport/channel_pool.hpp): which channel a pull or push may use, giving its
// slots back when the request is answered, and what of that the log hears.
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

// One channel per shard, sized for the member's slice of it.
constexpr shm::channel_pool::limits one_channel{1, 1, 0};

// The pool, made at the first use; nullptr when the fast path is off.
shm::channel_pool* pool_of(stage_pointer self) {
  auto& st = self->state;
  if (st.opts.fast_path_tag.empty()) return nullptr;
  auto& fp = st.fast;
  if (!fp.pool) {
    const std::size_t n = st.shards.size();
    fp.pool = std::make_unique<shm::channel_pool>(st.opts.fast_path_tag, st.core->place().rank, n, one_channel);
    for (std::uint32_t s = 0; s < n; ++s)
      if (!st.shards[s] || st.shards[s].node() == self->node()) fp.pool->skip(s);
    fp.pull_channel.assign(n, std::nullopt);
    fp.push_channel.assign(n, std::nullopt);
    fp.push_lease.assign(n, std::nullopt);
  }
  return fp.pool.get();
}

void closes(stage_pointer self, std::uint32_t s, const char* why) {
  spdlog::info("{}: closes its shared-memory channel to shard {} ({}); its tensors go over the network", who(self), s,
               why);
}

}  // namespace

bool offer_reply_slot(stage_pointer self, std::uint32_t s, pull_request& r) {
  auto* pool = pool_of(self);
  if (!pool || s >= self->state.shards.size()) return false;
  std::string problem;
  auto lease = pool->lend_reply(s, self->state.core->slice_numel(s), &problem);
  if (!problem.empty())
    spdlog::warn("{}: no shared-memory channel to shard {} ({}); its tensors go over the network", who(self), s,
                 problem);
  if (!lease) return false;
  r.reply_to = std::move(lease->where);
  self->state.fast.pull_channel[s] = lease->channel;
  return true;
}

expected<bool> take_shared_reply(stage_pointer self, std::uint32_t s, params_reply& p) {
  auto* pool = pool_of(self);
  auto& fp = self->state.fast;
  if (!pool || s >= fp.pull_channel.size() || !fp.pull_channel[s])
    return failure{"shard " + std::to_string(s) + " answered in shared memory that this member did not offer"};
  const std::size_t c = *std::exchange(fp.pull_channel[s], std::nullopt);
  auto t = pool->take_reply(s, c, p.shared);
  pool->reply_settled(s, c, false, false);  // taken (borrowed until the next pull) or refused: the slot is free
  if (!t) return t.error();
  if (t->first)
    spdlog::info("{}: exchanges tensors with shard {} through shared memory ({})", who(self), s, pool->name(s, c));
  p.params = std::move(t->values);
  p.shared = {};
  return true;
}

void settle_reply_slot(stage_pointer self, std::uint32_t s, bool answered_inline, bool timed_out) {
  auto* pool = pool_of(self);
  auto& fp = self->state.fast;
  if (!pool || s >= fp.pull_channel.size() || !fp.pull_channel[s]) return;
  const std::size_t c = *std::exchange(fp.pull_channel[s], std::nullopt);
  switch (pool->reply_settled(s, c, answered_inline, timed_out)) {
    case shm::channel_pool::settled::closed_by_timeout:
      closes(self, s, "a pull timed out, so the shard may still write its slot");
      break;
    case shm::channel_pool::settled::declined:
      closes(self, s, "the shard could not map it: another host, or shared memory unavailable there");
      break;
    case shm::channel_pool::settled::nothing:
      break;
  }
}

tensor push_buffer(stage_pointer self, std::uint32_t s, std::int64_t numel) {
  auto* pool = pool_of(self);
  if (!pool || s >= self->state.shards.size()) return {};
  auto lease = pool->lend_push(s, numel);
  if (!lease) return {};
  self->state.fast.push_lease[s] = stage_fast_path::lent_push{lease->channel, lease->buffer.bytes()};
  return std::move(lease->buffer);
}

bool whole_slices(stage_pointer self, std::uint32_t s) {
  auto& st = self->state;
  if (s >= st.shards.size() || !st.shards[s] || st.shards[s].node() == self->node()) return true;
  auto* pool = pool_of(self);
  return pool && !pool->declined(s);
}

bool share_push(stage_pointer self, std::uint32_t s, push_grads& g) {
  auto* pool = pool_of(self);
  auto& fp = self->state.fast;
  if (!pool || s >= fp.push_lease.size()) return false;
  if (auto lease = std::exchange(fp.push_lease[s], std::nullopt)) {
    if (g.grad.bytes() == lease->at) {
      shared_tensor where = pool->seal_push(s, lease->channel, g.grad);
      if (!where.empty()) {
        g.shared = std::move(where);
        g.grad = tensor();
        fp.push_channel[s] = lease->channel;
        return true;
      }
      // A slot buffer that cannot be sent from its slot travels as a copy: the mapping
      // may be gone before the message is serialized.
      g.grad = tensor(g.grad);
    }
    pool->push_settled(s, lease->channel, false);
  }
  auto sealed = pool->copy_push(s, g.grad);  // an encoded gradient, packed outside the slot
  if (!sealed) return false;
  g.shared = std::move(sealed->where);
  g.grad = tensor();
  fp.push_channel[s] = sealed->channel;
  return true;
}

void settle_push_slot(stage_pointer self, std::uint32_t s, bool timed_out) {
  auto* pool = pool_of(self);
  auto& fp = self->state.fast;
  if (!pool || s >= fp.push_channel.size() || !fp.push_channel[s]) return;
  pool->push_settled(s, *std::exchange(fp.push_channel[s], std::nullopt), timed_out);
  if (timed_out) closes(self, s, "a push timed out, so the shard may still read its slot");
}

}  // namespace troupe::stage_shell
