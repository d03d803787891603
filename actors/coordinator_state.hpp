// coordinator_state: what the coordinator's shell keeps beside its core (handles by rank
// and shard index, the joins and key-value calls waiting for an answer, the run requests,
// the checkpoint committer) and the shell's functions that more than one of its files
// call. The behavior is in coordinator.cpp; restarting in place in
// coordinator_restart.cpp; a key-value job's calls and actions in coordinator_keys.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "actors/coordinator.hpp"
#include "actors/drive_core.hpp"
#include "actors/evaluator.hpp"
#include "base/serial_worker.hpp"
#include "core/job_core.hpp"

namespace troupe::coordinator_shell {

template <class Answer, class Handle>
struct pending_join {
  caf::typed_response_promise<Answer> promise;
  Handle handle;
};

struct coordinator_state {
  std::unique_ptr<job_core> core;
  job_callbacks cb;
  evaluator_actor evaluator;
  std::vector<shard_actor> shards;   // by index
  std::vector<stage_actor> members;  // by rank
  std::map<ticket, pending_join<shard_welcome, shard_actor>> shard_joins;
  std::map<ticket, pending_join<worker_welcome, stage_actor>> member_joins;
  // A key-value job's calls waiting for the core (Note [Jobs of keys] in core/job_keys.cpp):
  // inits and lookups, and the optimizer and barrier calls answered ok.
  std::map<ticket, caf::typed_response_promise<kv_key_layout>> key_answers;
  std::map<ticket, caf::typed_response_promise<caf::ok_atom>> ok_answers;
  std::vector<caf::typed_response_promise<job_result>> runs;
  join_gate gate;
  ticket next_ticket = 1;
  // Completes checkpoints off the scheduler's threads (their fsyncs would stall the
  // shards sharing them); made with the first commit.
  std::unique_ptr<serial_worker> committer;
  // Note [Restarting in place]: what the next core is made from; whether the shell is
  // between cores, and the joins that wait for the next one; the restarts so far.
  job_spec job;
  std::optional<model> layout;
  observability obs;
  bool restarting = false;
  std::vector<std::function<void()>> held_joins;
  std::int64_t restarts = 0;
  std::uint64_t generation = 0;  // the cores made so far, less one
  static inline const char* name = "troupe.coordinator";
};

using coord_pointer = local_coordinator_actor::stateful_pointer<coordinator_state>;

void carry_out(coord_pointer self, job_actions_list actions);

// Calls the core and carries out what it returns; an exception that escapes the core
// ends the job with compute_failed instead of reaching CAF.
template <class F>
void drive(coord_pointer self, F&& call) {
  drive_core(*self->state.core, std::forward<F>(call),
             [self](job_actions_list actions) { carry_out(self, std::move(actions)); });
}

// drive, for the answer to a request the core of `generation` made: dropped when that
// core has been replaced since (Note [Restarting in place]).
template <class F>
void drive_answer(coord_pointer self, std::uint64_t generation, F&& call) {
  if (self->state.generation == generation) drive(self, std::forward<F>(call));
}

inline std::chrono::milliseconds request_timeout(coord_pointer self) {
  return std::chrono::milliseconds(self->state.core->job().request_timeout_ms);
}

// A handler for a failed request to a shard or the evaluator: the job ends with `code`.
// One for a core that has been replaced since is dropped (Note [Restarting in place]).
inline auto failing(coord_pointer self, errc code, std::string what) {
  return [=, gen = self->state.generation](caf::error& e) {
    drive_answer(self, gen, [&](job_core& c) { return c.fail({code, what + ": " + describe(e)}); });
  };
}

// Calls `done` once each of the `count` requests ask(i) makes (i < count) is acknowledged
// (right away when count is 0); a refusal or a timeout ends the job with `code`.
template <class Ask>
void ask_all(coord_pointer self, std::size_t count, Ask ask, std::function<void()> done, errc code, std::string what) {
  auto acks = std::make_shared<std::size_t>(count);
  if (count == 0) done();
  for (std::size_t i = 0; i < count; ++i)
    ask(i).then(
        [=](caf::ok_atom) {
          if (--*acks == 0) done();
        },
        failing(self, code, what));
}

// Answers every run request, refuses the joins and key-value calls still waiting, stops
// every member, shard and the evaluator (with the job's error, so remote nodes can tell,
// or normally), then the coordinator itself.
void finish(coord_pointer self, std::variant<job_result, fault>& outcome);

// coordinator_restart.cpp (Note [Restarting in place]): stops every node of the job with
// `restarting` and finds the checkpoint the next core starts from; the next core, once it
// is found; a join that comes meanwhile waits (`join` runs once the next core is there).
void restart_in_place(coord_pointer self, const fault& why, const std::vector<std::uint32_t>& finished);
void on_restart_ready(coord_pointer self, restart_ready& r);
bool hold_join(coord_pointer self, std::function<void()> join);
// There too, a key-value job's lost shard replaced while its members go on (Note
// [Replacing a key-value shard] in core/job_shard_replacement.cpp).
void carry(coord_pointer self, job_actions::find_shard_checkpoint& a);
void on_replacement_found(coord_pointer self, replacement_found& r);
void carry(coord_pointer self, job_actions::start_shard& a);
void carry(coord_pointer self, job_actions::announce_shard& a);

// Whether member `rank`'s own actor sent the message; if not, the message (`what`, for
// the log) is refused, counted and logged once per peer (Note [Members are identities]).
bool from_member(coord_pointer self, std::uint32_t rank, const char* what);
void note_refused(coord_pointer self, const char* what);

// coordinator_keys.cpp (Note [Jobs of keys] in core/job_keys.cpp): a key-value member's
// call, answered through a promise kept under the ticket the core is called with;
// the key-value actions carried out; a refusal of one of those calls (false: the ticket is
// not one); every call still waiting answered with `e` (the job ended or restarts).
template <class Answer, class Call>
caf::result<Answer> key_call(coord_pointer self, Call call) {
  auto& st = self->state;
  const ticket t = st.next_ticket++;
  auto promise = self->make_response_promise<Answer>();
  if constexpr (std::is_same_v<Answer, kv_key_layout>)
    st.key_answers.emplace(t, promise);
  else
    st.ok_answers.emplace(t, promise);
  drive(self, [&](job_core& c) { return call(c, t); });
  return promise;
}
caf::result<kv_key_layout> on_key_call(coord_pointer self, const kv_init& r);
caf::result<kv_key_layout> on_key_call(coord_pointer self, const kv_lookup& r);
caf::result<caf::ok_atom> on_key_call(coord_pointer self, const kv_set_optimizer& r);
caf::result<caf::ok_atom> on_key_call(coord_pointer self, const kv_barrier& r);
void carry(coord_pointer self, job_actions::define_on_shards& a);
void carry(coord_pointer self, job_actions::answer_key& a);
void carry(coord_pointer self, job_actions::set_optimizer_on_shards& a);
void carry(coord_pointer self, job_actions::release& a);
bool refuse_key_call(coord_pointer self, ticket t, const fault& why);
void end_key_calls(coord_pointer self, const caf::error& e);

}  // namespace troupe::coordinator_shell
