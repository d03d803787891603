// shard_pulls: every job's pull on a shard server (Note [Rounds per part] in
// core/shard_core.hpp). A pull that states its clock (a training member's step) names
// its stage's one part, whole or a piece, and is answered with its slice
// (shard_train.cpp); one without is a user's loop's, of the parts and rows it names
// (shard_kv_pulls.cpp). The core holds each part the pull may not have yet under a token;
// the pull is answered once the core released its last held part, and fails once it
// dropped one (its member left). The sender is checked by shard_server.cpp.
#include "actors/shard_state.hpp"

namespace troupe::shard_shell {

namespace {

kv_pull_reply answer(shard_pointer self, const kv_pull& r) {
  return r.states_clock() ? slice_answer(self, r) : kv_answer(self, r);
}

// Why the pull cannot be served here, before the core sees it.
caf::error refused(shard_pointer self, const kv_pull& r) {
  if (r.states_clock() ? !serves_training(self) : !serves_kv(self))
    return r.states_clock() ? not_training(self) : not_kv(self);
  if (r.shard != self->state.index) return wrong_shard(self, r.shard);
  if (auto f = r.states_clock() ? check_step_pull(self, r) : check_kv_pull(*self->state.core, r)) return make_error(*f);
  return {};
}

}  // namespace

void serve_pull(shard_pointer self, kv_pull& r, answer_to<kv_pull_reply>& rp) {
  auto& st = self->state;
  if (auto e = refused(self, r)) return rp.deliver(std::move(e));
  std::vector<shard_core::token> held;
  auto ask = [&](std::optional<kv_part_id> part) {
    const auto t = st.next_token++;
    auto o = part ? st.core->pull_part(r.worker, *part, t) : st.core->pull(r.worker, r.clock, t);
    if (o.decision == shard_core::pull_decision::hold) held.push_back(t);
    return o.decision == shard_core::pull_decision::reject ? o.error : std::nullopt;
  };
  std::optional<fault> rejected;
  if (r.states_clock())
    rejected = ask(std::nullopt);
  else
    for (std::size_t i = 0; i < r.parts.size() && !rejected; ++i) rejected = ask(r.parts[i]);
  if (rejected) {  // the parts held before the refused one are not answered either
    for (auto t : held) st.core->cancel_pull(t);
    if (st.m) st.m->rejected(to_string(rejected->code))->Increment();
    return rp.deliver(make_error(*rejected));
  }
  if (held.empty()) return rp.deliver(answer(self, r));
  const std::uint64_t id = st.next_pull++;
  for (auto t : held) st.held_tokens[t] = id;
  st.held.emplace(id, held_pull{held.size(), wall::now(), std::move(r), rp});
  observe(self);
}

void settle_pulls(shard_pointer self) {
  auto& st = self->state;
  // The pull a token of the core belongs to, once (its token is forgotten).
  auto pull_of = [&](shard_core::token t) {
    auto it = st.held_tokens.find(t);
    if (it == st.held_tokens.end()) return st.held.end();
    const std::uint64_t id = it->second;
    st.held_tokens.erase(it);
    return st.held.find(id);
  };
  const auto now = wall::now();
  for (auto t : st.core->take_released()) {
    auto it = pull_of(t);
    if (it == st.held.end() || --it->second.waiting > 0) continue;
    held_pull h = std::move(it->second);
    const std::uint64_t id = it->first;
    st.held.erase(it);
    h.promise.deliver(answer(self, h.request));
    if (st.m) st.m->hold_seconds->Observe(std::chrono::duration<double>(now - h.since).count());
    if (st.obs.trace) st.obs.trace->async_span(st.track, "held pull", id, h.since, now);
  }
  // A pull of several parts fails at its first part dropped; its other tokens then find
  // no pull.
  for (auto t : st.core->take_dropped()) {
    auto it = pull_of(t);
    if (it == st.held.end()) continue;
    held_pull h = std::move(it->second);
    st.held.erase(it);
    h.promise.deliver(make_error(errc::not_member, "the worker left the job"));
  }
}

}  // namespace troupe::shard_shell
