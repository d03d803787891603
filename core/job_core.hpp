// The coordinator's logic for every kind of job, free of CAF: it admits shards and members
// (assigning shard indices and member ranks), starts the job once everyone has joined,
// tracks the members' clocks and epochs, closes each epoch (the shards' statistics, an
// evaluation, a summary), replaces a lost worker with one that stands by or rejoins,
// applies the failure policy, watches for stalls, and produces the job's result or error.
// A key-value job (job.kv: users' own training loops, Note [Jobs of keys] in
// core/job_keys.cpp) has no model: its members name their own keys, which the core's
// registry places on the shards, and the job ends when every member has left. The
// coordinator actor (actors/coordinator.cpp) is its shell: it decodes messages into the
// calls below, names each pending request with a ticket, and carries out the actions
// they return, in order.
//
// Failure policy: a dead worker is logged, counted and removed from every shard's
// membership (sync rounds close without it, ssp bounds ignore it); the job goes on while
// one worker lives. A dead shard restarts the job in place from its newest checkpoint
// (--on-shard-loss recover, the default with --checkpoint-dir), or ends it. A diverged
// worker, or no progress for stall_timeout, ends the job with an error, never a hang.
//
// Phases: admitting (joins are collected) -> starting (the shards are told the members)
// -> training (members step; a lost worker may be replaced) -> finishing (every member is
// done; the last epochs close and the result is gathered) -> finished. Once finished,
// every call returns nothing but refusals.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/errc.hpp"
#include "core/job_actions.hpp"
#include "core/job_checkpoint.hpp"
#include "core/job_ledger.hpp"
#include "core/kv_layout.hpp"
#include "core/kv_messages.hpp"
#include "core/loss_record.hpp"
#include "core/messages.hpp"
#include "core/sample_deal.hpp"
#include "monitoring/observability.hpp"
#include "train/model.hpp"

namespace troupe {

// What every member's assignment holds: its rank, the job, the key-range table, the
// clock it starts at and, in --mode allreduce, a ring of every replica. The coordinator
// adds the shards' and neighbours' addresses and the local group (with which the ring
// holds the groups' leaders only).
member_assignment basic_assignment(const job_spec& job, const key_table& table, std::uint32_t rank,
                                   std::int64_t resume_clock);

enum class job_phase : std::uint8_t { admitting, starting, training, finishing, finished };
std::string_view name_of(job_phase p);

class job_core {
 public:
  using time_point = job_clock::time_point;

  // job must be prepared and valid (prepare_job), m its model (a key-value job's: none,
  // an empty model).
  job_core(job_spec job, const model& m, observability obs, time_point now);

  // Before any join: the job goes on from a checkpoint (Note [Resuming a job]).
  void resume_from(const resume_point& r);
  // Before any join: this core restarts a job that lost a shard server, for the
  // `times`-th time (Note [Restarting in place] in actors/coordinator_restart.cpp); its
  // result counts them, and a stall before every node has joined says a server is missing.
  void restarted_in_place(std::int64_t times);

  job_actions_list on_shard_join(ticket t, const shard_join& j, time_point now);
  job_actions_list on_member_join(ticket t, const worker_join& j, time_point now);
  job_actions_list shards_started(time_point now);
  job_actions_list member_added(std::uint32_t rank, time_point now);

  job_actions_list on_step(const step_report& r, time_point now);
  job_actions_list on_epoch(const worker_epoch& r, time_point now);
  job_actions_list on_done(const worker_done& r, time_point now);
  // A local group's id from the member that sent it (the shell knows who that is).
  job_actions_list on_group_id(std::uint32_t sender, const group_id& g);
  // The member's answer to a grant of rows (job_deals.cpp; the shell checked the sender).
  job_actions_list on_rows_answer(const rows_answer& a);

  job_actions_list on_stats(std::uint64_t gather, const shard_stats& s);
  job_actions_list on_snapshot(std::uint64_t gather, std::uint32_t shard, const params_reply& r);
  job_actions_list on_evaluated(const eval_reply& r);

  // A key-value job's members (job_keys.cpp; the shell checked the sender's rank): the
  // first init of a key defines it on its shards, every other init and lookup waits for
  // that; the shards defined a key, or could not; the shards' optimizer; a barrier.
  job_actions_list on_init(ticket t, const kv_init& r);
  job_actions_list on_lookup(ticket t, const kv_lookup& r);
  job_actions_list defined(std::uint64_t id);
  job_actions_list define_failed(std::uint64_t id, const fault& why);
  job_actions_list on_set_optimizer(ticket t, const kv_set_optimizer& r);
  job_actions_list on_barrier(ticket t, std::uint32_t rank);
  // A key-value job's lost shard (job_shard_replacement.cpp, Note [Replacing a key-value
  // shard]): the checkpoint its replacement restores (or why there is none); the
  // replacement started.
  job_actions_list replacement_checkpoint(const expected<resume_point>& found);
  job_actions_list shard_replaced(std::uint32_t shard, time_point now);

  // Checkpoints (job_durability.cpp): a shard's file of one is written, or not; the
  // shell's commit of one is done (error: why it failed).
  job_actions_list on_checkpoint_saved(const checkpoint_saved& s);
  // A key-value job's shard writes its file of a step (Note [The last checkpoints of a
  // key-value job]): the job's result waits for it.
  job_actions_list on_checkpoint_begun(const checkpoint_begun& b);
  job_actions_list on_checkpoint_committed(std::int64_t step, const std::optional<std::string>& error);

  // A member or shard monitored by the shell went away. reason: the Troupe error it died
  // with, if it was one; why: how the shell renders the reason.
  job_actions_list on_member_down(std::uint32_t rank, const std::optional<fault>& reason, const std::string& why,
                                  time_point now);
  job_actions_list on_shard_down(std::uint32_t shard, const std::string& why);
  // A member waiting to stand in went away before it got a rank.
  void on_standby_down(ticket t);
  // The watchdog, every watch_interval: a stall ends the job; step rates are updated; a
  // checkpoint is asked for when --checkpoint-seconds have passed; once training is over,
  // a last checkpoint that is overdue is given up.
  // Time this process did not run is not a stall (Note [Paused processes]).
  static constexpr std::chrono::seconds watch_interval{1};
  static constexpr std::chrono::seconds paused_gap{10};
  job_actions_list on_tick(time_point now);
  // Anything the shell could not do (a shard that did not answer): the job ends with f.
  job_actions_list fail(fault f);

  job_phase phase() const { return phase_; }
  const job_spec& job() const { return job_; }
  // A key-value job's keys (nullptr in a training job).
  const kv_registry* registry() const { return registry_ ? &*registry_ : nullptr; }
  std::int64_t num_params() const { return num_params_; }
  // A training job's largest message (core/job_frames.hpp), which the shell makes the
  // process's frame bound; 0 for a job of keys, whose members define them as it runs.
  std::uint64_t frame_bytes() const { return frame_bytes_; }
  std::uint32_t shard_count() const { return static_cast<std::uint32_t>(shard_hosts_.size()); }
  // Who writes the files of a checkpoint: the shards, or with no shard servers the stages
  // of replica 0 (Note [Members' checkpoints] in core/member_checkpoint.cpp), by index.
  std::uint32_t checkpoint_writers() const { return job_.servers > 0 ? shard_count() : job_.pipeline_stages; }
  // Members that have not died (finished ones count).
  std::uint32_t live_members() const;
  // "worker 3", or "stage 1 of replica 0" in a pipeline job.
  std::string member_name(std::uint32_t rank) const;

 private:
  static constexpr std::size_t straggler_window = 9;  // Note [Naming stragglers]
  struct member {
    std::string host;                  // where pipeline neighbours reach it (cluster)
    std::uint16_t port = 0;
    std::string locality;              // worker_join::locality
    std::vector<std::uint32_t> group;  // --local-reduce: its local group (ascending), or empty
    bool live = true, done = false;
    std::int32_t epochs_reported = 0;  // epochs this member has finished
    std::int64_t clock = 0;
    std::int64_t clock_at_tick = 0;    // for the step rate
    double step_rate = 0.0;            // steps/s, smoothed over ticks
    // Note [Naming stragglers]: compute seconds of its latest steps (a ring, busy_steps %
    // straggler_window the next slot) and their median; steps reported; named.
    std::array<double, straggler_window> recent_busy{};
    double busy_per_step = 0.0;
    std::int64_t busy_steps = 0;
    bool straggler = false;
    // Note [Balancing shares]: rows per second of compute, smoothed; steps counted; told
    // to keep fewer rows than its pace asks while it catches up.
    double row_rate = 0.0;
    std::int64_t rate_steps = 0;
    bool catching_up = false;
  };
  static constexpr std::int64_t min_straggler_steps = 2;  // Note [Naming stragglers]
  static constexpr std::int64_t min_balance_steps = 20;  // Note [Balancing shares]
  struct pending_gather {
    std::optional<std::int32_t> epoch;  // nullopt: the final one
    std::size_t pending = 0;
    std::vector<shard_stats> stats;
    tensor params;
  };

  fault wrong_job(const std::string& id) const;
  member_assignment assignment(std::uint32_t rank, std::int64_t resume_clock) const;
  void maybe_start(job_actions_list& out);
  std::uint32_t rank_for_join(std::int32_t wanted) const;
  void form_local_groups(job_actions_list& out);
  void rejoin(ticket t, job_actions_list& out, time_point now);
  void admit_replacement(ticket t, std::uint32_t rank, job_actions_list& out, time_point now);
  std::optional<std::uint32_t> free_rank() const;
  void check_epochs(job_actions_list& out, time_point now);
  // Note [Replicas agree]: the fault when r's parameters differ from another replica's.
  std::optional<fault> replicas_differ(const worker_epoch& r);
  void close_epoch(std::int32_t e, job_actions_list& out, time_point now);
  void start_gather(std::optional<std::int32_t> epoch, bool with_params, job_actions_list& out);
  void gathered(std::uint64_t id, job_actions_list& out);
  void report_epoch(std::int32_t e, job_actions_list& out);
  void check_training_done(job_actions_list& out, time_point now);
  void maybe_finalize(job_actions_list& out);
  void finish(std::variant<job_result, fault> outcome, job_actions_list& out);
  // A lost node with --checkpoint-dir: the record of how far the job got (Note [Steps replayed]).
  void note_loss(const fault& f, job_actions_list& out) const;
  void count_nodes();
  void update_step_rates(time_point now);
  // Note [Naming stragglers]: the member's compute per step, and who is a straggler now.
  void note_busy(const step_report& r, job_actions_list& out);
  // Note [Dealing a lost worker's samples]: the grants the dealer makes now; what a lost
  // member leaves (said in a note); how the final result counts them.
  void deal_rows(job_actions_list& out);
  void deal_lost_rows(std::uint32_t rank, job_actions_list& out);
  void balance_shares(const step_report& r, job_actions_list& out);
  // Note [Balancing shares]: the share of its rate-proportional rows a slow member keeps
  // so that it catches up with the others' median clock (1: not behind).
  double catch_up(std::uint32_t rank) const;
  std::string redealt_account(const job_result& r) const;
  // A checkpoint could not be completed: warn and count, or end the job (checkpoints.fatal).
  void checkpoint_failed(std::int64_t step, const std::string& why, job_actions_list& out);

  // A key-value job (job_keys.cpp): a join after the start takes a new rank (ranks are
  // never reused: the shards keep per-rank state) and is admitted to the shards; a member
  // that is done or lost leaves the shards, its staged init and the barrier; the job ends
  // once no member is left.
  void admit_new_member(ticket t, job_actions_list& out);
  job_actions_list member_gone(std::uint32_t rank, bool lost, const std::string& why, time_point now);
  void drop_staged(std::uint32_t rank);
  void check_barrier(job_actions_list& out);
  void maybe_finish_keys(job_actions_list& out, time_point now);
  // Once every member has left: the result, after the checkpoints under way are committed
  // (or given up on, --request-timeout after the last member left).
  void finish_keys(job_actions_list& out, time_point now);
  job_actions_list overdue_key_checkpoints(time_point now);
  std::int64_t commits_pending_ = 0;  // commit_checkpoint actions not yet answered
  struct pending_define {
    std::string name;
    std::vector<ticket> waiting;  // inits and lookups answered once the shards hold the key
  };
  std::optional<kv_registry> registry_;
  std::map<std::uint64_t, pending_define> defines_;  // by key id
  // A first init sent in chunks (kv_init): the elements received so far, by (rank, key);
  // they grow only with what a member sent, and go when it leaves or the key exists.
  std::map<std::pair<std::uint32_t, std::string>, std::vector<float>> staged_;
  std::set<std::uint32_t> at_barrier_;
  std::vector<ticket> barrier_tickets_;
  std::uint32_t started_members_ = 0;  // ranks below this are in the shards' start
  // Note [Replacing a key-value shard]: the shard being replaced, since when, the
  // checkpoint it restores (once found), the server that joins in its place; the member
  // joins that wait for it; the shards replaced so far.
  struct shard_replacement {
    std::uint32_t shard = 0;
    time_point since{};
    std::optional<resume_point> from;
    std::optional<ticket> join;
    std::string host;
    std::uint16_t port = 0;
  };
  std::optional<shard_replacement> replacing_;
  std::vector<ticket> held_member_joins_;
  std::int64_t shards_replaced_ = 0;
  bool replaces_shards() const;
  // --mode allreduce with a command: the refusal of a member past the ring's, and of a
  // call about keys.
  fault ring_is_full() const;
  fault no_keys_in_a_ring(const std::string& call) const;
  job_actions_list shard_lost_in_place(std::uint32_t shard, const std::string& lost, time_point now);
  void admit_replacement_shard(ticket t, const shard_join& j, job_actions_list& out);
  void maybe_start_replacement(job_actions_list& out);
  std::optional<fault> replacement_overdue(time_point now) const;
  time_point started_at_{};

  job_spec job_;
  key_table table_;
  model layout_;
  std::int64_t num_params_ = 0;
  std::uint64_t frame_bytes_ = 0;
  std::optional<monitoring::coordinator_metrics> m_;
  job_phase phase_ = job_phase::admitting;
  std::vector<std::string> shard_hosts_;
  std::vector<std::uint16_t> shard_ports_;
  std::vector<member> members_;
  std::map<std::uint32_t, ticket> pending_joins_;  // by rank, until the job starts
  // Members that joined a running job while no rank was free: each takes the next rank
  // whose worker dies (a restarted node can come up before its old self is known dead).
  std::vector<ticket> standby_;
  std::map<std::uint32_t, ticket> admitting_;  // rank -> the join it answers once the shards added it
  time_point last_progress_, last_tick_, last_watch_;
  job_ledger ledger_;
  std::int32_t epochs_closed_ = 0;  // epochs whose summary is under way or done
  int evals_pending_ = 0;
  bool finalizing_ = false;
  std::uint64_t next_gather_ = 1;
  std::map<std::uint64_t, pending_gather> gathers_;
  std::map<std::int32_t, epoch_summary> summaries_;  // epochs being closed, by epoch
  std::map<std::int32_t, tensor> epoch_params_;     // --servers 0: assembled from the stages
  // --mode allreduce, per (epoch, stage): the first report's rank and FNV-1a (Note
  // [Replicas agree] in job_watch.cpp).
  std::map<std::pair<std::int32_t, std::uint32_t>, std::pair<std::uint32_t, std::uint64_t>> replica_fnv1a_;
  tensor final_params_;
  std::int64_t workers_lost_ = 0;
  std::optional<sample_dealer> dealer_;  // jobs that deal (deals_samples), from the start
  std::string first_loss_;  // why the first member was lost
  // Note [Resuming a job]: where the members start, and where the shards' state comes from.
  std::int64_t start_clock_ = 0;
  std::optional<resume_point> resume_;
  // Note [A shard lost after training] (job_epochs.cpp): resumed from the job's end
  // checkpoint, so no member joins; the shards' values are evaluated and the job ends.
  bool at_end_ = false;
  void evaluate_end(job_actions_list& out, time_point now);
  std::int64_t restarts_in_place_ = 0;
  struct pending_checkpoint {
    std::vector<checkpoint_saved> saved;  // the shards' files written so far
    std::size_t failed = 0;               // shards that could not write theirs
    std::size_t begun = 0;                // key-value shards that began theirs
    // Every shard that began its file has written it, or said it could not.
    bool begun_settled() const { return saved.size() + failed >= begun; }
  };
  std::map<std::int64_t, pending_checkpoint> checkpoints_;  // by step
  std::int64_t checkpoints_written_ = 0, checkpoints_failed_ = 0;
  // The newest step whose checkpoint was committed or failed: the job's result waits for
  // its last one (its final clock is always a checkpoint step).
  std::int64_t checkpoint_settled_ = -1;
  bool final_checkpoint_settled() const;
  // Finishing: the last checkpoint not complete within the request timeout after
  // training ended counts as failed, so the result is not held by a writer that hangs.
  job_actions_list overdue_final_checkpoint(time_point now);
  time_point finishing_since_{};
  // --checkpoint-seconds: asks the shards for a checkpoint a few steps ahead of the fastest
  // member once that long has passed since the last one was asked for.
  void maybe_request_checkpoint(time_point now, job_actions_list& out);
  time_point last_checkpoint_request_{};
  std::int64_t requested_step_ = 0;
};

}  // namespace troupe
