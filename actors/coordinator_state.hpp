// coordinator_state: what the coordinator's shell keeps beside its core (handles by rank
// and shard index, the joins waiting for an answer, the run requests, the checkpoint
// committer) and the shell's functions that more than one of its files call. The
// behavior is in coordinator.cpp; restarting in place in coordinator_restart.cpp.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
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
  std::vector<shard_actor> shards;  // by index
  std::vector<stage_actor> members;  // by rank
  std::map<ticket, pending_join<shard_welcome, shard_actor>> shard_joins;
  std::map<ticket, pending_join<worker_welcome, stage_actor>> member_joins;
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

// Answers every run request, refuses the joins still waiting, stops every member, shard
// and the evaluator (with the job's error, so remote nodes can tell, or normally), then
// the coordinator itself.
void finish(coord_pointer self, std::variant<job_result, fault>& outcome);

// coordinator_restart.cpp (Note [Restarting in place]): stops every node of the job with
// `restarting` and finds the checkpoint the next core starts from; the next core, once it
// is found; a join that comes meanwhile waits (`join` runs once the next core is there).
void restart_in_place(coord_pointer self, const fault& why);
void on_restart_ready(coord_pointer self, restart_ready& r);
bool hold_join(coord_pointer self, std::function<void()> join);

}  // namespace troupe::coordinator_shell
