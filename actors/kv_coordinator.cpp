// kv_coordinator: decodes messages for kv_job_core and carries out its actions.
#include "actors/kv_coordinator.hpp"

#include <spdlog/spdlog.h>

#include <map>
#include <variant>

#include "actors/drive_core.hpp"
#include "core/kv_job_core.hpp"
#include "monitoring/refusals.hpp"

namespace troupe {

namespace {

struct kv_coordinator_state {
  std::unique_ptr<kv_job_core> core;
  job_callbacks cb;
  join_gate gate;
  std::vector<shard_actor> shards;   // by index
  std::vector<caf::actor> members;   // by rank
  std::map<ticket, std::pair<caf::typed_response_promise<shard_welcome>, shard_actor>> shard_joins;
  std::map<ticket, std::pair<caf::typed_response_promise<worker_welcome>, caf::actor>> member_joins;
  std::map<ticket, caf::typed_response_promise<kv_key_layout>> key_answers;
  std::map<ticket, caf::typed_response_promise<caf::ok_atom>> ok_answers;
  std::vector<caf::typed_response_promise<job_result>> runs;
  ticket next_ticket = 1;
  static inline const char* name = "troupe.kv_coordinator";
};

using kv_pointer = local_coordinator_actor::stateful_pointer<kv_coordinator_state>;

void carry_out(kv_pointer self, kv_job_actions_list actions);

template <class F>
void drive(kv_pointer self, F&& call) {
  drive_core(*self->state.core, std::forward<F>(call),
             [self](kv_job_actions_list actions) { carry_out(self, std::move(actions)); });
}

std::chrono::milliseconds request_timeout(kv_pointer self) {
  return std::chrono::milliseconds(self->state.core->job().request_timeout_ms);
}

// Calls done() once the request ask(i) makes, for each i in `to` (a shard, or a message
// for one), was acknowledged; a refusal or a timeout ends the job.
template <class Ask>
void ask_shards(kv_pointer self, const std::vector<std::uint32_t>& to, Ask ask, std::function<void()> done,
                std::string what) {
  auto acks = std::make_shared<std::size_t>(to.size());
  if (to.empty()) return done();
  for (auto s : to)
    ask(s).then(
        [=](caf::ok_atom) {
          if (--*acks == 0) done();
        },
        [=](caf::error& e) {
          drive(self, [&](kv_job_core& c) { return c.fail({errc::shard_lost, what + ": " + describe(e)}); });
        });
}

std::vector<std::uint32_t> every_shard(kv_pointer self) {
  std::vector<std::uint32_t> all(self->state.shards.size());
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

member_identity identity_of_rank(kv_pointer self, std::uint32_t rank) {
  const auto& m = self->state.members;
  return rank < m.size() ? identity_of(caf::actor_cast<caf::strong_actor_ptr>(m[rank])) : member_identity{};
}

void finish(kv_pointer self, std::variant<job_result, fault>& outcome) {
  auto& st = self->state;
  const caf::error reason = answer_runs(st.runs, outcome);
  const caf::error ended = make_error(errc::cluster_full, "the job has ended");
  for (auto& [t, j] : st.member_joins) j.first.deliver(ended);
  for (auto& [t, j] : st.shard_joins) j.first.deliver(ended);
  for (auto& [t, p] : st.key_answers) p.deliver(reason ? reason : ended);
  for (auto& [t, p] : st.ok_answers) p.deliver(reason ? reason : ended);
  for (auto& m : st.members)
    if (m) self->send_exit(m, reason);
  for (auto& s : st.shards) self->send_exit(s, reason);
  self->quit(reason);
}

void carry_out(kv_pointer self, kv_job_actions_list actions) {
  auto& st = self->state;
  for (auto& action : actions) {
    std::visit(
        [&](auto& a) {
          using A = std::decay_t<decltype(a)>;
          using namespace kv_job_actions;
          if constexpr (std::is_same_v<A, welcome_shard>) {
            auto j = st.shard_joins.extract(a.t);
            st.shards.push_back(j.mapped().second);
            self->monitor(j.mapped().second);
            j.mapped().first.deliver(std::move(a.welcome));
          } else if constexpr (std::is_same_v<A, welcome_member>) {
            auto j = st.member_joins.extract(a.t);
            worker_welcome w;
            if (a.assignment.shard_hosts.empty() || a.assignment.shard_hosts.front().empty()) w.shards = st.shards;
            w.place = std::move(a.assignment);
            j.mapped().first.deliver(std::move(w));
          } else if constexpr (std::is_same_v<A, refuse>) {
            if (auto j = st.member_joins.extract(a.t)) {
              j.mapped().first.deliver(make_error(a.why));
            } else if (auto s = st.shard_joins.extract(a.t)) {
              s.mapped().first.deliver(make_error(a.why));
            } else if (auto k = st.key_answers.extract(a.t)) {
              k.mapped().deliver(make_error(a.why));
            } else if (auto o = st.ok_answers.extract(a.t)) {
              o.mapped().deliver(make_error(a.why));
            }
          } else if constexpr (std::is_same_v<A, assign_rank>) {
            if (st.members.size() <= a.rank) st.members.resize(a.rank + 1);
            st.members[a.rank] = st.member_joins.at(a.t).second;
          } else if constexpr (std::is_same_v<A, start_shards>) {
            shard_start start{a.members, {}};
            for (std::uint32_t rank : a.members.workers) start.identities.push_back(identity_of_rank(self, rank));
            ask_shards(
                self, every_shard(self),
                [=](std::uint32_t s) { return self->request(self->state.shards[s], request_timeout(self), start_atom::value, start); },
                [=] { drive(self, [&](kv_job_core& c) { return c.shards_started(job_clock::now()); }); },
                "a shard did not start");
          } else if constexpr (std::is_same_v<A, admit_to_shards>) {
            const shard_admit m{{a.rank, 0}, identity_of_rank(self, a.rank)};
            const std::uint32_t rank = a.rank;
            ask_shards(
                self, every_shard(self),
                [=](std::uint32_t s) { return self->request(self->state.shards[s], request_timeout(self), join_atom::value, m); },
                [=] { drive(self, [&](kv_job_core& c) { return c.member_added(rank); }); },
                "a shard did not admit a new worker");
          } else if constexpr (std::is_same_v<A, remove_from_shards>) {
            for (auto& s : st.shards) self->send(s, left_atom::value, a.rank);
          } else if constexpr (std::is_same_v<A, define_on_shards>) {
            // Definitions for the shards holding parts of the key, with their rows of the
            // value: one message per shard, or several where its parts would exceed one
            // message (each part fits in one).
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
            std::vector<std::uint32_t> to(msgs.size());
            for (std::uint32_t i = 0; i < to.size(); ++i) to[i] = i;
            const std::uint64_t id = a.id;
            auto shared = std::make_shared<std::vector<std::pair<std::uint32_t, kv_define>>>(std::move(msgs));
            ask_shards(
                self, to,
                [=](std::uint32_t i) {
                  const auto& [shard, def] = (*shared)[i];
                  return self->request(self->state.shards[shard], request_timeout(self), kv_define_atom::value, def);
                },
                [=] { drive(self, [&](kv_job_core& c) { return c.defined(id); }); },
                "a shard did not define key " + kv_key_display(a.layout.name));
          } else if constexpr (std::is_same_v<A, answer_key>) {
            if (auto k = st.key_answers.extract(a.t)) k.mapped().deliver(std::move(a.layout));
          } else if constexpr (std::is_same_v<A, set_optimizer_on_shards>) {
            const ticket t = a.t;
            const kv_set_optimizer opt = a.opt;
            ask_shards(
                self, every_shard(self),
                [=](std::uint32_t s) { return self->request(self->state.shards[s], request_timeout(self), kv_opt_atom::value, opt); },
                [=] {
                  if (auto o = self->state.ok_answers.extract(t)) o.mapped().deliver(caf::ok_atom::value);
                },
                "a shard did not take the optimizer");
          } else if constexpr (std::is_same_v<A, release>) {
            for (ticket t : a.tickets)
              if (auto o = st.ok_answers.extract(t)) o.mapped().deliver(caf::ok_atom::value);
          } else if constexpr (std::is_same_v<A, note>) {
            spdlog::warn("coordinator: {}", a.text);
            if (st.cb.on_event) st.cb.on_event(a.text);
          } else if constexpr (std::is_same_v<A, job_actions::finish>) {
            finish(self, a.outcome);
          }
        },
        action);
    if (std::holds_alternative<job_actions::finish>(action)) return;  // the actor has quit
  }
}

void on_down(kv_pointer self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (std::uint32_t s = 0; s < st.shards.size(); ++s)
    if (dm.source == st.shards[s].address())
      return drive(self, [&](kv_job_core& c) { return c.on_shard_down(s, caf::to_string(dm.reason)); });
  for (std::uint32_t r = 0; r < st.members.size(); ++r)
    if (st.members[r] && dm.source == st.members[r].address())
      return drive(self, [&](kv_job_core& c) { return c.on_member_down(r, describe(dm.reason), job_clock::now()); });
}

bool from_member(kv_pointer self, std::uint32_t rank, const char* what) {
  const auto& members = self->state.members;
  const auto& sender = self->current_sender();
  if (rank < members.size() && members[rank] && sender && members[rank].address() == sender->address()) return true;
  const std::string peer = caf::to_string(sender);
  if (monitoring::count_refusal(monitoring::refusal::not_a_member, peer))
    spdlog::warn("coordinator: refused {} from {}, which does not hold the rank it names", what, peer);
  return false;
}

bool proven(kv_pointer self, const char* role, const std::string& proof) {
  auto& gate = self->state.gate;
  if (!gate) return true;
  const auto& sender = self->current_sender();
  const std::string node = sender ? caf::to_string(sender->node()) : std::string();
  const auto refusal = gate(role, proof, node);
  if (!refusal) return true;
  if (monitoring::count_refusal(refusal->why, node))
    spdlog::warn("coordinator: refused a {} join from node {} {}", role, node, refusal->reason);
  return false;
}


local_coordinator_actor::behavior_type kv_coordinator(kv_pointer self, job_spec job, job_callbacks cb, join_gate gate) {
  auto& st = self->state;
  st.cb = std::move(cb);
  st.gate = std::move(gate);
  st.core = std::make_unique<kv_job_core>(std::move(job), job_clock::now());
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  auto key_promise = [=](ticket& t) {
    t = self->state.next_ticket++;
    auto p = self->make_response_promise<kv_key_layout>();
    self->state.key_answers.emplace(t, p);
    return p;
  };
  auto ok_promise = [=](ticket& t) {
    t = self->state.next_ticket++;
    auto p = self->make_response_promise<caf::ok_atom>();
    self->state.ok_answers.emplace(t, p);
    return p;
  };
  return {
      [=](join_atom, const shard_join& j) -> caf::result<shard_welcome> {
        if (!proven(self, "server", j.proof)) return make_error(errc::not_member, "refused");
        const ticket t = self->state.next_ticket++;
        auto handle = caf::actor_cast<shard_actor>(self->current_sender());  // (the promise takes the sender)
        auto promise = self->make_response_promise<shard_welcome>();
        self->state.shard_joins[t] = {promise, handle};
        drive(self, [&](kv_job_core& c) { return c.on_shard_join(t, j); });
        return promise;
      },
      [=](join_atom, const worker_join& j) -> caf::result<worker_welcome> {
        if (!proven(self, "worker", j.proof)) return make_error(errc::not_member, "refused");
        const ticket t = self->state.next_ticket++;
        auto handle = caf::actor_cast<caf::actor>(self->current_sender());
        auto promise = self->make_response_promise<worker_welcome>();
        self->monitor(handle);
        self->state.member_joins[t] = {promise, handle};
        drive(self, [&](kv_job_core& c) { return c.on_member_join(t, j); });
        return promise;
      },
      [=](kv_init_atom, const kv_init& r) -> caf::result<kv_key_layout> {
        if (!from_member(self, r.worker, "a key init")) return make_error(errc::not_member, "refused");
        ticket t;
        auto p = key_promise(t);
        drive(self, [&](kv_job_core& c) { return c.on_init(t, r); });
        return p;
      },
      [=](kv_lookup_atom, const kv_lookup& r) -> caf::result<kv_key_layout> {
        if (!from_member(self, r.worker, "a key lookup")) return make_error(errc::not_member, "refused");
        ticket t;
        auto p = key_promise(t);
        drive(self, [&](kv_job_core& c) { return c.on_lookup(t, r); });
        return p;
      },
      [=](kv_opt_atom, const kv_set_optimizer& r) -> caf::result<caf::ok_atom> {
        if (!from_member(self, r.worker, "an optimizer")) return make_error(errc::not_member, "refused");
        ticket t;
        auto p = ok_promise(t);
        drive(self, [&](kv_job_core& c) { return c.on_set_optimizer(t, r); });
        return p;
      },
      [=](kv_barrier_atom, const kv_barrier& r) -> caf::result<caf::ok_atom> {
        if (!from_member(self, r.worker, "a barrier")) return make_error(errc::not_member, "refused");
        ticket t;
        auto p = ok_promise(t);
        drive(self, [&](kv_job_core& c) { return c.on_barrier(t, r.worker); });
        return p;
      },
      [=](done_atom, const worker_done& r) {
        if (!from_member(self, r.rank, "a done report")) return;
        drive(self, [&](kv_job_core& c) { return c.on_done(r.rank, job_clock::now()); });
      },
      [](progress_atom, const step_report&) {},
      [](epoch_atom, const worker_epoch&) {},
      [](group_atom, const group_id&) {},
      [](checkpoint_atom, const checkpoint_saved&) {},
      [](rows_atom, const rows_answer&) {},
      [](const checkpoint_committed&) {},
      [=](run_request) -> caf::result<job_result> {
        auto promise = self->make_response_promise<job_result>();
        self->state.runs.push_back(promise);
        return promise;
      },
      [](watchdog_tick) {},
      [](restart_ready&) {},  // a key-value job keeps no checkpoints to restart from
  };
}

}  // namespace

local_coordinator_actor spawn_kv_coordinator(caf::actor_system& sys, job_spec job, job_callbacks cb, join_gate gate) {
  return sys.spawn(kv_coordinator, std::move(job), std::move(cb), std::move(gate));
}

}  // namespace troupe
