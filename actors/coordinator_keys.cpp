// coordinator_keys: a key-value job's side of the coordinator's shell (Note [Jobs of keys]
// in core/job_keys.cpp): the definitions of a key's parts on the shards that hold them,
// the shards' optimizer, and the answers to members' inits, lookups and barriers, kept as
// promises under the tickets the core names.
#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "actors/coordinator_state.hpp"

namespace troupe::coordinator_shell {

namespace {

// The definitions for the shards holding parts of a key, with their rows of the value:
// one message per shard, or several where its parts would exceed one message (each part
// fits in one).
std::vector<std::pair<std::uint32_t, kv_define>> definitions(const job_actions::define_on_shards& a) {
  std::vector<std::pair<std::uint32_t, kv_define>> msgs;
  std::map<std::uint32_t, std::pair<std::size_t, std::int64_t>> open;  // shard -> (message, floats)
  const std::int64_t row = a.layout.row_numel();
  for (const auto& p : a.layout.parts) {
    auto it = open.find(p.shard);
    if (it == open.end() || it->second.second + p.numel > kv_max_message_floats) {
      msgs.push_back({p.shard, kv_define{a.layout.name, {}, {}}});
      it = open.insert_or_assign(p.shard, std::make_pair(msgs.size() - 1, std::int64_t{0})).first;
    }
    auto& d = msgs[it->second.first].second;
    it->second.second += p.numel;
    d.parts.push_back(p.id);
    tensor v = tensor::uninitialized({p.numel});
    copy(v, a.value.view().flat(p.row_begin * row, p.numel));
    d.values.push_back(std::move(v));
  }
  return msgs;
}

}  // namespace

namespace {

// A key-value member's call: refused in a training job, or from an actor that does not
// hold the rank it names; else the core's, answered through the promise under its ticket.
template <class Answer, class Msg, class Call>
caf::result<Answer> checked_call(coord_pointer self, const Msg& r, const char* what, Call call) {
  if (!self->state.core->job().kv) return not_a_kv_job();
  if (!from_member(self, r.worker, what)) return make_error(errc::not_member, "refused");
  return key_call<Answer>(self, call);
}

}  // namespace

caf::result<kv_key_layout> on_key_call(coord_pointer self, const kv_init& r) {
  return checked_call<kv_key_layout>(self, r, "a key init", [&](job_core& c, ticket t) { return c.on_init(t, r); });
}

caf::result<kv_key_layout> on_key_call(coord_pointer self, const kv_lookup& r) {
  return checked_call<kv_key_layout>(self, r, "a key lookup", [&](job_core& c, ticket t) { return c.on_lookup(t, r); });
}

caf::result<caf::ok_atom> on_key_call(coord_pointer self, const kv_set_optimizer& r) {
  return checked_call<caf::ok_atom>(self, r, "an optimizer",
                                    [&](job_core& c, ticket t) { return c.on_set_optimizer(t, r); });
}

caf::result<caf::ok_atom> on_key_call(coord_pointer self, const kv_barrier& r) {
  return checked_call<caf::ok_atom>(self, r, "a barrier",
                                    [&](job_core& c, ticket t) { return c.on_barrier(t, r.worker); });
}

void carry(coord_pointer self, job_actions::define_on_shards& a) {
  auto msgs = std::make_shared<std::vector<std::pair<std::uint32_t, kv_define>>>(definitions(a));
  const std::uint64_t id = a.id;
  ask_all(
      self, msgs->size(),
      [=](std::size_t i) {
        const auto& [shard, def] = (*msgs)[i];
        return self->request(self->state.shards[shard], request_timeout(self), kv_define_atom::value, def);
      },
      [=, gen = self->state.generation] { drive_answer(self, gen, [&](job_core& c) { return c.defined(id); }); },
      errc::shard_lost, "a shard did not define key " + kv_key_display(a.layout.name));
}

void carry(coord_pointer self, job_actions::answer_key& a) {
  if (auto k = self->state.key_answers.extract(a.t)) k.mapped().deliver(std::move(a.layout));
}

void carry(coord_pointer self, job_actions::set_optimizer_on_shards& a) {
  const ticket t = a.t;
  const kv_set_optimizer opt = a.opt;
  ask_all(
      self, self->state.shards.size(),
      [=](std::size_t s) {
        return self->request(self->state.shards[s], request_timeout(self), kv_opt_atom::value, opt);
      },
      [=] {
        if (auto o = self->state.ok_answers.extract(t)) o.mapped().deliver(caf::ok_atom::value);
      },
      errc::shard_lost, "a shard did not take the optimizer");
}

void carry(coord_pointer self, job_actions::release& a) {
  for (ticket t : a.tickets)
    if (auto o = self->state.ok_answers.extract(t)) o.mapped().deliver(caf::ok_atom::value);
}

bool refuse_key_call(coord_pointer self, ticket t, const fault& why) {
  auto& st = self->state;
  if (auto k = st.key_answers.extract(t)) {
    k.mapped().deliver(make_error(why));
    return true;
  }
  if (auto o = st.ok_answers.extract(t)) {
    o.mapped().deliver(make_error(why));
    return true;
  }
  return false;
}

void end_key_calls(coord_pointer self, const caf::error& e) {
  auto& st = self->state;
  for (auto& [t, p] : st.key_answers) p.deliver(e);
  for (auto& [t, p] : st.ok_answers) p.deliver(e);
  st.key_answers.clear();
  st.ok_answers.clear();
}

}  // namespace troupe::coordinator_shell
