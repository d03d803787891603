// stage_fast_path: a member's calls through the same-host fast path (Note [Same-host fast
// path] in transport/shared_slots.hpp): its links to its shards (transport/shard_links.hpp,
// as for a key-value member) wired with one channel per shard, the call in flight to each
// shard (transport/shard_call.hpp, as for a key-value member) with the slot it holds until
// it is answered, and what of that the log hears.
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

// One channel per shard (a member has one pull and one push in flight to each), sized for
// the member's slice of it.
constexpr shm::channel_pool::limits one_channel{1, 1, 0};

void closes(stage_pointer self, std::uint32_t s, const char* why) {
  spdlog::info("{}: {}", who(self), shard_call::closing_note(s, why));
}

// The call in flight to s of `calls` (null: no such shard).
shard_call* call_to(std::vector<shard_call>& calls, std::uint32_t s) { return s < calls.size() ? &calls[s] : nullptr; }

}  // namespace

void wire_links(stage_pointer self) {
  auto& st = self->state;
  std::vector<shard_links::reach> reach;
  for (const auto& shard : st.shards)
    reach.push_back(!shard                         ? shard_links::reach::absent
                    : shard.node() == self->node() ? shard_links::reach::this_process
                                                   : shard_links::reach::other_process);
  st.links->wire(std::move(reach), {st.opts.fast_path_tag, st.core->place().rank, one_channel});
  st.slots.pulls.clear();
  st.slots.pushes.clear();
  for (std::uint32_t s = 0; s < st.shards.size(); ++s) {
    st.slots.pulls.emplace_back(st.links, s);
    st.slots.pushes.emplace_back(st.links, s);
  }
}

bool offer_reply_slot(stage_pointer self, std::uint32_t s, kv_pull& r) {
  auto& st = self->state;
  auto* call = call_to(st.slots.pulls, s);
  if (!call) return false;
  std::string problem;
  r.reply_to = call->offer_reply(st.core->slice_numel(s), &problem);
  if (!problem.empty())
    spdlog::warn("{}: no shared-memory channel to shard {} ({}); its tensors go over the network", who(self), s,
                 problem);
  return call->offers_reply_slot();
}

expected<bool> take_shared_reply(stage_pointer self, std::uint32_t s, kv_pull_reply& p) {
  shard_call unoffered(nullptr, s);
  auto* call = call_to(self->state.slots.pulls, s);
  if (!call) call = &unoffered;
  auto t = call->take_reply(p.shared);
  if (t && t->first)
    spdlog::info("{}: exchanges tensors with shard {} through shared memory ({})", who(self), s,
                 call->reply_channel_name());
  call->settle_reply(false, false);  // taken (borrowed until the next pull) or refused: the slot is free
  if (!t) return t.error();
  p.data = std::move(t->values);
  p.shared = {};
  return true;
}

void settle_reply_slot(stage_pointer self, std::uint32_t s, bool answered_inline, bool timed_out) {
  auto* call = call_to(self->state.slots.pulls, s);
  if (!call) return;
  if (const char* why = shard_call::why_closed(call->settle_reply(answered_inline, timed_out))) closes(self, s, why);
}

bool share_push(stage_pointer self, std::uint32_t s, kv_push& g) {
  auto* call = call_to(self->state.slots.pushes, s);
  if (!call) return false;
  g.shared = call->route_push(g.data);
  return call->holds_push_slot();
}

void settle_push_slot(stage_pointer self, std::uint32_t s, bool timed_out) {
  auto* call = call_to(self->state.slots.pushes, s);
  if (call && call->settle_push(timed_out)) closes(self, s, shard_call::why_push_closed());
}

}  // namespace troupe::stage_shell
