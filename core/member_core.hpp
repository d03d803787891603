// The logic of one member of a job, free of CAF: a data-parallel worker, or one stage of
// one pipeline replica (a worker is the one-stage case). Given its welcome it builds its
// stage (its layers of the model, its data, its device, the optimizer with --servers 0)
// and then loops over its replica's data shard until the job's epochs are done:
//   pull its slice of every shard -> follow the schedule's actions for the minibatch
//   (forward: stage 0 reads data, the others wait for the previous stage's activation;
//   the last stage computes the loss; backward: the last stage starts from the loss, the
//   others wait for the next stage's activation gradient) -> push its gradient slices
//   (with --servers 0: apply the optimizer itself) -> report the step.
// With gradient buckets the pulls and pushes go in pieces that overlap the first
// forward and the last backward (Note [Gradient buckets] in core/gradient_buckets.hpp).
// A message that arrives before its action is due waits in the stage's inbox; one from a
// stranger is dropped; a malformed one from a neighbour stops the member with a typed
// error, and so does a neighbour that dies, a diverging loss, or an op that throws
// (compute_failed), never a hang. The pipeline_stage actor (actors/pipeline_stage.cpp) is
// its shell: it decodes messages into the calls below and carries out the actions.
//
// Phases: joining (no welcome yet) -> wiring (the shell connects to the shards and the
// neighbours) -> grouping (--local-reduce: opening the local group) -> training (pulling,
// then computing a step) -> finishing (waiting for the last pushes' answers) -> stopped.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/compute_fault.hpp"
#include "base/errc.hpp"
#include "base/expected.hpp"
#include "core/checkpoint_steps.hpp"
#include "core/epoch_clock.hpp"
#include "core/gradient_buckets.hpp"
#include "core/kv_messages.hpp"
#include "core/member_data.hpp"
#include "core/member_device.hpp"
#include "core/member_meters.hpp"
#include "core/member_samples.hpp"
#include "core/member_setup.hpp"
#include "core/member_slices.hpp"
#include "core/messages.hpp"
#include "core/pipeline_schedule.hpp"
#include "core/pull_round.hpp"
#include "core/push_ledger.hpp"
#include "core/ring_collective.hpp"
#include "core/ring_seats.hpp"
#include "core/ring_step.hpp"
#include "core/sample_deal.hpp"
#include "core/shard_checkpoint.hpp"
#include "core/stage_inbox.hpp"
#include "core/step_plan.hpp"
#include "monitoring/observability.hpp"
#include "tensor/optimizer.hpp"
#include "train/dataset.hpp"
#include "train/stage_replica.hpp"

namespace troupe {

// Where this member could share a local group: GPUs of one machine (NCCL), or threads of
// one process (the CPU backend).
std::string member_locality(device d);

namespace member_actions {
struct pull { std::uint32_t shard; kv_pull request; };  // answer: on_params / on_pull_failed
struct push { std::uint32_t shard; kv_push grads; };      // answer: on_push_ack / on_push_refused
struct send_activation { activation a; };                   // to the next stage
struct send_activation_grad { activation_grad g; };         // to the previous stage
struct send_ring_piece { ring_piece p; };                   // to the ring's next replica (--mode allreduce)
struct report_step { step_report r; };                      // to the coordinator
struct report_epoch { worker_epoch r; };                    // to the coordinator
struct send_group_id { group_id id; };                      // to the coordinator, which relays it
struct await_group_id {};        // call on_group_deadline after --request-timeout
struct schedule_step {};         // call on_next_step from the mailbox (nothing else to wait for)
struct resume {};                // carry out what came before, then call on_resume at once
struct warn { std::string text; };  // for the log: a message dropped, a gradient refused
struct answer_rows { rows_answer a; };  // to the coordinator
// Note [Members' checkpoints]: write this stage's part of a checkpoint (off the member's
// thread), then tell the coordinator with a checkpoint_saved.
struct save_checkpoint {
  std::shared_ptr<const shard_image> image;
  checkpoint_saved saved;    // what to tell the coordinator once the file is written (error: why not)
  checkpoint_identity id;    // what the file carries
};
struct finish { worker_done r; };  // send it to the coordinator, then stop normally
struct stop { fault why; };        // stop with this error
// The job's largest message (core/job_frames.hpp): make it the process's frame bound.
struct bound_frames { std::uint64_t bytes; };
}  // namespace member_actions

using member_action =
    std::variant<member_actions::pull, member_actions::push, member_actions::send_activation,
                 member_actions::send_activation_grad, member_actions::send_ring_piece, member_actions::report_step, member_actions::report_epoch,
                 member_actions::send_group_id, member_actions::await_group_id, member_actions::schedule_step,
                 member_actions::resume, member_actions::warn, member_actions::answer_rows,
                 member_actions::save_checkpoint, member_actions::finish, member_actions::stop,
                 member_actions::bound_frames>;
using member_actions_list = std::vector<member_action>;

enum class member_phase : std::uint8_t { joining, wiring, grouping, training, finishing, stopped };
std::string_view name_of(member_phase p);

class member_core {
 public:
  explicit member_core(member_setup setup);
  ~member_core();

  // Builds the stage the welcome describes; the member is then wiring (or stopped).
  member_actions_list on_welcome(const member_assignment& a);
  // The shell has connected to the shards and neighbours: open the local group, or train.
  member_actions_list on_wired();
  member_actions_list on_group_id(std::vector<std::uint8_t> id);  // relayed by the coordinator
  member_actions_list on_group_deadline();
  member_actions_list on_params(std::uint32_t shard, kv_pull_reply r);
  member_actions_list on_pull_failed(std::uint32_t shard, const std::string& why);
  // What comes next with nothing to wait for: the next step, or opening the local group.
  member_actions_list on_next_step();
  // Goes on with the step after a stage tensor has been sent (Note [Stage tensors leave at once]).
  member_actions_list on_resume();
  // A stage tensor, once training; from_neighbour: the shell saw it come from this
  // stage's neighbour (anyone else's is dropped with a warning); sender: how the warning
  // names who sent it.
  member_actions_list on_activation(activation a, bool from_neighbour, const std::string& sender);
  member_actions_list on_activation_grad(activation_grad g, bool from_neighbour, const std::string& sender);
  // The push of `clock` to `shard` was answered after `seconds`; a late answer (Note
  // [Backup workers] in core/shard_core.hpp) counts its samples as dropped and moves this
  // member to the open round at its next step.
  member_actions_list on_push_ack(std::uint32_t shard, std::int64_t clock, const kv_push_ack& ack, double seconds);
  member_actions_list on_push_refused(std::uint32_t shard, std::int64_t clock, const std::string& why);
  // A pipeline neighbour died (a normal exit is no loss: it sent everything needed). One
  // that owes this stage nothing more in the job's last step is only warned about (Note
  // [A pipeline neighbour gone in the last step] in core/member_core.cpp).
  member_actions_list on_neighbour_down(bool previous, const std::string& why);
  // --mode allreduce (Note [Ring all-reduce of gradients] in core/member_ring.cpp): a
  // piece of a ring all-reduce; from_neighbour: the shell saw it come from this member's
  // previous replica in the ring (anyone else's is dropped with a warning).
  member_actions_list on_ring_piece(ring_piece p, bool from_neighbour, const std::string& sender);
  // A replica next to this one in the ring died (`previous`: the one it receives from).
  // The next one, gone during the job's last step, is only warned about (Note [A next
  // replica gone in the last step] in core/member_ring.cpp).
  member_actions_list on_ring_neighbour_down(bool previous, const std::string& why);
  // Whether this member's gradients go round a ring of replicas (it has a seat in its
  // assignment's ring: Note [Rings of leaders] in core/ring_seats.cpp); the member it
  // sends its pieces to (the same stage of the next replica in the ring), that replica,
  // and the replica it receives them from. Call the last three only when ringed().
  bool ringed() const { return seat_.has_value(); }
  const std::optional<ring_seat>& seat() const { return seat_; }
  // The floats each ring all-reduce of this member reduces (its stage's parameters).
  std::int64_t ring_numel() const { return net_ ? net_->num_params() : 0; }
  std::uint32_t ring_next() const;
  std::uint32_t next_replica() const;
  std::uint32_t previous_replica() const;
  // Extra rows from the coordinator (Note [Dealing a lost worker's samples] in
  // core/sample_deal.hpp): taken if its first step lies ahead and every row fits, else
  // returned; answered either way.
  member_actions_list on_rows_granted(rows_grant g);
  // Train fewer (or again more) of its own rows from its next step (Note [Balancing
  // shares] in core/sample_deal.hpp); answered with the clock it applies from.
  member_actions_list on_rows_shed(const rows_shed& s);
  // Note [Members' checkpoints] (core/member_checkpoint.cpp): whether this member writes
  // its stage's part of the job's checkpoints (replica 0 of a job whose members hold the
  // parameters, with --checkpoint-dir); the coordinator asks for one at `step` as well
  // (--checkpoint-seconds), which this member takes once it has finished that step.
  bool writes_checkpoints() const;
  // Note [Residuals in checkpoints]: whether it writes its 2-bit residuals at the steps.
  bool writes_residuals() const;
  void on_checkpoint_request(std::int64_t step);

  member_phase phase() const { return phase_; }
  // Whether a minibatch's actions are under way (from its parameters to its last backward).
  bool in_step() const { return step_.running; }
  const member_assignment& place() const { return place_; }
  // The shards this member pushes to and pulls from.
  const std::vector<std::uint32_t>& active_shards() const { return slices_.active(); }
  // The elements this member pushes to and pulls from `shard` (0 for a shard it does not use).
  std::int64_t slice_numel(std::uint32_t shard) const { return slices_.numel(shard); }
  // The parameters this member holds when it applies the optimizer itself (--servers 0,
  // --mode allreduce); null otherwise.
  const tensor* local_params() const { return local_opt_ && rep_ ? &rep_->params() : nullptr; }
  std::uint32_t stage() const { return stage_; }
  std::uint32_t replica() const { return replica_; }
  bool first_stage() const { return stage_ == 0; }
  bool last_stage() const { return stage_ + 1 == place_.job.pipeline_stages; }
  // Note [A pipeline neighbour gone in the last step]: whether the previous (or next)
  // stage still owes this one an activation (or activation gradient) in this job.
  bool neighbour_owes_more(bool previous) const;
  // "worker 3" or "stage 1 of replica 0": how logs and errors name this member.
  std::string who() const;

 private:
  using wall = std::chrono::system_clock;
  using steady = std::chrono::steady_clock;

  bool pipelined() const { return place_.job.pipeline_stages > 1; }
  bool simulated() const { return place_.job.simulate_compute_ms > 0.0; }
  bool grouped() const { return !place_.group.empty(); }
  bool group_leader() const { return grouped() && place_.group.front() == place_.rank; }

  // member_core.cpp: building the stage, starting, the local group.
  std::optional<fault> build(const member_assignment& a);
  void lay_out_shards(const key_table& table, const stage_span& span);
  std::optional<fault> open_device(std::int64_t max_rows, int slots);  // and allocates the replica
  void start_training(member_actions_list& out);
  void open_group(member_actions_list& out);
  void stop(fault why, member_actions_list& out);
  // Runs a compute call; a throw stops the member with compute_failed naming `op`.
  template <class F>
  bool guarded(const std::string& op, member_actions_list& out, F&& body);
  // Runs a collective of the local group; a failure (a member died) stops this member
  // with stage_lost.
  template <class F>
  bool in_group(const char* what, member_actions_list& out, F&& body);
  static double seconds_between(wall::time_point a, wall::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  static std::int64_t micros(wall::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  }
  // member_pulls.cpp: the step's pulls.
  void start_pulls(member_actions_list& out);
  void took_params(std::uint32_t shard, std::optional<std::size_t> bucket, std::int64_t version,
                   member_actions_list& out);
  // member_step.cpp: the training loop.
  void begin_epoch();  // tells the samples that the clock's epoch began
  void begin_step(member_actions_list& out);
  void run_actions(member_actions_list& out);
  // Run the action if its input is here: done (and whether it produced a stage tensor
  // to send), or not (wait, or a failure that has stopped the member), or paused (part
  // of it is done and its pushes go out first: it goes on at on_resume).
  enum class action_result { waiting, done, sent, paused };
  action_result try_forward(int mb, member_actions_list& out);
  action_result try_backward(int mb, member_actions_list& out);
  action_result try_backward_in_buckets(int mb, member_actions_list& out);
  action_result backward_done(int mb, wall::time_point begin, tensor grad_in, member_actions_list& out);
  bool in_pieces(std::uint32_t shard) const {
    return buckets_on() && !(setup_.links && setup_.links->whole_slices(shard));
  }
  bool loss_is_finite(member_actions_list& out);
  void end_step(member_actions_list& out);
  // The end of a step once its gradient is complete (summed over the ring, or the group):
  // the update (pushes, or the local optimizer), the reports, the next step.
  void update_and_report(member_actions_list& out);
  // member_checkpoint.cpp: a resumed job's state, and checkpoints once they are due
  // (with shard servers, the 2-bit residuals: Note [Residuals in checkpoints]).
  std::optional<fault> restore_checkpoint();
  void maybe_checkpoint(member_actions_list& out);
  bool checkpoint_due(std::int64_t step);  // at `step` itself, once
  void save_residuals_if_due(member_actions_list& out);  // once the step's last push is encoded
  void restore_residuals(member_actions_list& out);
  // member_ring.cpp: the step's ring all-reduce, and pieces that came before it began.
  void start_ring(member_actions_list& out);
  void take_ring_piece(ring_piece p, member_actions_list& out);
  void ring_progress(member_actions_list& out);
  void send_piece(ring_piece p, member_actions_list& out);  // counted in the metrics
  bool take_leaders_sum(member_actions_list& out);           // member_update.cpp
  std::string replica_name(std::uint32_t replica) const;
  bool buckets_on() const { return slices_.bucketed(); }
  // Pushes what bucket k completes: its piece of each shard that takes pieces, and with
  // the last bucket every other shard's whole slice (Note [Gradient buckets]).
  void push_bucket(std::size_t k, member_actions_list& out);
  void push_all(member_actions_list& out);
  void maybe_finish(member_actions_list& out);
  // Closes the epoch when the clock has reached its end: reports it, and begins the next
  // or finishes. False once the member is finishing.
  bool close_epoch_if_done(member_actions_list& out);
  // Note [Backup workers]: skips the rounds that closed without this member.
  bool skip_to_open_round(member_actions_list& out);
  void simulate(bool forward) const;
  void slow_down(steady::duration took) const;
  void trace_span(const char* name, wall::time_point begin, wall::time_point end, std::int32_t microbatch = -1);
  template <class Message>
  void on_stage_tensor(Message& m, bool forward, bool from_neighbour, const std::string& sender,
                       member_actions_list& out);

  member_setup setup_;
  member_phase phase_ = member_phase::joining;
  member_assignment place_;
  std::uint32_t replica_ = 0, stage_ = 0;
  member_data data_;                            // what the first and the last stage read
  member_slices slices_;                        // its slices of the shards, and its buckets' pieces
  // The step's pulls (the step's first forward runs on the layers whose parameters are
  // here and goes on as the rest arrive), and what its pushes owe it.
  pull_round pulls_;
  push_ledger pushes_;
  std::optional<model> net_;                    // this stage's layers
  member_device device_;                        // where it computes, and its local group
  std::optional<std::vector<std::uint8_t>> group_id_;  // the leader's, once made or relayed
  std::unique_ptr<stage_replica> rep_;          // real compute (declared after device_: destroyed first)
  std::optional<optimizer_state> local_opt_;    // --servers 0
  std::int64_t param_offset_ = 0;               // this stage's first float in the model's flat vector
  checkpoint_identity checkpoint_id_;           // what this job's checkpoint files carry
  std::uint64_t frame_bytes_ = 0;               // the job's largest message (core/job_frames.hpp)
  // Note [Members' checkpoints]: the steps they are due at, the last one taken (or
  // resumed from), and the steps the coordinator asked for.
  checkpoint_steps checkpoints_;
  tensor synthetic_grad_;                       // --simulate-compute
  // --mode allreduce: where this replica sits in the ring, if it does, and the step's
  // collective with the next one's early pieces.
  std::optional<ring_seat> seat_;
  ring_step ring_;
  member_samples samples_;                      // the rows each step trains
  lr_schedule schedule_;
  epoch_clock time_;                            // its clock, epoch and the epoch's tally
  std::optional<stage_inbox> acts_in_, grads_in_;
  // The minibatch in progress: its schedule, where the stage is in it.
  step_plan step_;  // the step in progress: its actions, their progress, its timings
  member_meters meters_;  // its metrics, trace spans and stored activations
};

template <class F>
bool member_core::guarded(const std::string& op, member_actions_list& out, F&& body) {
  if (auto f = catch_compute(who() + ": " + op, std::forward<F>(body))) {
    stop(std::move(*f), out);
    return false;
  }
  return true;
}

template <class F>
bool member_core::in_group(const char* what, member_actions_list& out, F&& body) {
  try {
    body();
    return true;
  } catch (const std::exception& e) {
    stop({errc::stage_lost, who() + ": the local group's " + what + " failed: " + e.what()}, out);
    return false;
  }
}

}  // namespace troupe
