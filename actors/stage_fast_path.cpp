// stage_fast_path: a member's calls through the same-host fast path (Note [Same-host fast
// path] in transport/shared_slots.hpp): its links to its shards (transport/shard_links.hpp,
// as for a key-value member) wired with one channel per shard, the slot a pull or push
// holds while in flight, giving it back when the call is answered, and what of that the
// log hears.
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

// One channel per shard (a member has one pull and one push in flight to each), sized for
// the member's slice of it.
constexpr shm::channel_pool::limits one_channel{1, 1, 0};

void closes(stage_pointer self, std::uint32_t s, const char* why) {
  spdlog::info("{}: closes its shared-memory channel to shard {} ({}); its tensors go over the network", who(self), s,
               why);
}

// The channel the call in flight to s holds, taken from `by_shard`.
std::optional<std::size_t> take_channel(std::vector<std::optional<std::size_t>>& by_shard, std::uint32_t s) {
  return s < by_shard.size() ? std::exchange(by_shard[s], std::nullopt) : std::nullopt;
}

}  // namespace

void wire_links(stage_pointer self) {
  auto& st = self->state;
  std::vector<shard_links::reach> reach;
  for (const auto& shard : st.shards)
    reach.push_back(!shard                         ? shard_links::reach::absent
                    : shard.node() == self->node() ? shard_links::reach::this_process
                                                   : shard_links::reach::other_process);
  st.links->wire(std::move(reach), {st.opts.fast_path_tag, st.core->place().rank, one_channel});
  st.slots.pull_channel.assign(st.shards.size(), std::nullopt);
  st.slots.push_channel.assign(st.shards.size(), std::nullopt);
}

bool offer_reply_slot(stage_pointer self, std::uint32_t s, kv_pull& r) {
  auto& st = self->state;
  if (s >= st.slots.pull_channel.size()) return false;
  std::string problem;
  auto lease = st.links->route_pull(s, st.core->slice_numel(s), &problem);
  if (!problem.empty())
    spdlog::warn("{}: no shared-memory channel to shard {} ({}); its tensors go over the network", who(self), s,
                 problem);
  if (!lease) return false;
  r.reply_to = std::move(lease->where);
  st.slots.pull_channel[s] = lease->channel;
  return true;
}

expected<bool> take_shared_reply(stage_pointer self, std::uint32_t s, kv_pull_reply& p) {
  auto& links = *self->state.links;
  const auto c = take_channel(self->state.slots.pull_channel, s);
  if (!c) return failure{"shard " + std::to_string(s) + " answered in shared memory that this member did not offer"};
  auto t = links.take_reply(s, *c, p.shared);
  links.reply_settled(s, *c, false, false);  // taken (borrowed until the next pull) or refused: the slot is free
  if (!t) return t.error();
  if (t->first)
    spdlog::info("{}: exchanges tensors with shard {} through shared memory ({})", who(self), s,
                 links.channel_name(s, *c));
  p.data = std::move(t->values);
  p.shared = {};
  return true;
}

void settle_reply_slot(stage_pointer self, std::uint32_t s, bool answered_inline, bool timed_out) {
  const auto c = take_channel(self->state.slots.pull_channel, s);
  if (!c) return;
  switch (self->state.links->reply_settled(s, *c, answered_inline, timed_out)) {
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

bool share_push(stage_pointer self, std::uint32_t s, kv_push& g) {
  auto& st = self->state;
  if (s >= st.slots.push_channel.size()) return false;
  auto call = st.links->route_push(s, g.data);
  if (!call) return false;
  g.shared = std::move(call->where);
  st.slots.push_channel[s] = call->channel;
  return true;
}

void settle_push_slot(stage_pointer self, std::uint32_t s, bool timed_out) {
  const auto c = take_channel(self->state.slots.push_channel, s);
  if (c && self->state.links->push_settled(s, *c, timed_out))
    closes(self, s, "a push timed out, so the shard may still read its slot");
}

}  // namespace troupe::stage_shell
