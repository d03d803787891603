// lone_shard: the stand-in coordinator.
#include "actors/lone_shard.hpp"

#include <vector>

namespace troupe {

namespace {

struct lone_state {
  lone_state() = default;  // not an aggregate: CAF would try to build it from the actor
  shard_actor shard;
  std::vector<stage_actor> members;  // by rank
  std::vector<caf::typed_response_promise<worker_welcome>> waiting;  // by rank
  static inline const char* name = "troupe.lone_coordinator";
};

using lone_pointer = lone_coordinator_actor::stateful_pointer<lone_state>;

// Every member has joined: start the shard with them, then welcome each.
void start(lone_pointer self, const job_spec& job) {
  auto& st = self->state;
  shard_start s;
  for (std::uint32_t r = 0; r < st.members.size(); ++r) {
    s.members.workers.push_back(r);
    s.members.stages.push_back(0);
    s.identities.push_back(identity_of(caf::actor_cast<caf::strong_actor_ptr>(st.members[r])));
  }
  self->request(st.shard, caf::infinite, start_atom::value, std::move(s))
      .then(
          [=](caf::ok_atom) {
            auto& st = self->state;
            for (std::uint32_t r = 0; r < st.waiting.size(); ++r) {
              worker_welcome w;
              w.place.rank = r;
              w.place.world = static_cast<std::uint32_t>(st.waiting.size());
              w.place.job = job;
              w.shards = {st.shard};
              st.waiting[r].deliver(std::move(w));
            }
            st.waiting.clear();
          },
          [=](caf::error& e) {
            for (auto& p : self->state.waiting) p.deliver(e);
            self->state.waiting.clear();
          });
}

// Asks the shard, as its coordinator, and answers with what it says.
template <class Answer, class Atom>
caf::result<Answer> ask_shard(lone_pointer self, Atom atom) {
  if (!self->state.shard) return make_error(errc::not_started, "no shard has joined");
  auto promise = self->make_response_promise<Answer>();
  self->request(self->state.shard, caf::infinite, atom)
      .then([=](Answer& a) mutable { promise.deliver(std::move(a)); },
            [=](caf::error& e) mutable { promise.deliver(std::move(e)); });
  return promise;
}

lone_coordinator_actor::behavior_type lone(lone_pointer self, job_spec job, std::int64_t numel) {
  return {
      [=](join_atom, const shard_join&) -> caf::result<shard_welcome> {
        if (self->state.shard) return make_error(errc::cluster_full, "this coordinator welcomes one shard");
        self->state.shard = caf::actor_cast<shard_actor>(self->current_sender());
        return shard_welcome{0, job, {key_range{0, 0, 0, numel}}, {}};
      },
      [=](join_atom, const worker_join&) -> caf::result<worker_welcome> {
        auto& st = self->state;
        if (!st.shard || st.members.size() >= job.workers)
          return make_error(errc::cluster_full, "this coordinator admits one shard, then " +
                                                    std::to_string(job.workers) + " members");
        st.members.push_back(caf::actor_cast<stage_actor>(self->current_sender()));
        auto promise = self->make_response_promise<worker_welcome>();
        st.waiting.push_back(promise);
        if (st.members.size() == job.workers) start(self, job);
        return promise;
      },
      [](progress_atom, const step_report&) {},
      [](epoch_atom, const worker_epoch&) {},
      [](done_atom, const worker_done&) {},
      [](group_atom, const group_id&) {},
      [](checkpoint_atom, const checkpoint_saved&) {},
      [](checkpoint_atom, const checkpoint_begun&) {},
      [](rows_atom, const rows_answer&) {},
      [](kv_init_atom, const kv_init&) -> caf::result<kv_key_layout> { return not_a_kv_job(); },
      [](kv_lookup_atom, const kv_lookup&) -> caf::result<kv_key_layout> { return not_a_kv_job(); },
      [](kv_opt_atom, const kv_set_optimizer&) -> caf::result<caf::ok_atom> { return not_a_kv_job(); },
      [](kv_barrier_atom, const kv_barrier&) -> caf::result<caf::ok_atom> { return not_a_kv_job(); },
      [=](const lone_leave& l) {
        if (self->state.shard) self->send(self->state.shard, left_atom::value, l.rank);
      },
      [=](lone_snapshot) -> caf::result<params_reply> { return ask_shard<params_reply>(self, snapshot_atom::value); },
      [=](lone_stats) -> caf::result<shard_stats> { return ask_shard<shard_stats>(self, stats_atom::value); },
  };
}

}  // namespace

lone_coordinator_actor spawn_lone_coordinator(caf::actor_system& sys, job_spec job, std::int64_t numel) {
  return sys.spawn(lone, std::move(job), numel);
}

}  // namespace troupe
