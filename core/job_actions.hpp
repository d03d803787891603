// job_actions: what the job core (core/job_core.hpp) asks its shell, the coordinator
// actor, to do: welcome or refuse, tell the shards, gather, evaluate, checkpoint, restart
// or finish. The shell carries them out in order.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "base/errc.hpp"
#include "core/job_checkpoint.hpp"
#include "core/job_ledger.hpp"
#include "core/kv_layout.hpp"
#include "core/kv_messages.hpp"
#include "core/loss_record.hpp"
#include "core/messages.hpp"
#include "core/sample_deal.hpp"

namespace troupe {

// The shell's name for a request it answers later (a join's response promise).
using ticket = std::uint64_t;

namespace job_actions {
struct welcome_shard { ticket t; shard_welcome welcome; };
struct welcome_member { ticket t; member_assignment assignment; };
struct refuse { ticket t; fault why; };
// The member that joined with ticket t now has this rank (its handle is the rank's).
struct assign_rank { ticket t; std::uint32_t rank; };
// Every shard: start with these members; once all acknowledged, shards_started().
struct start_shards { membership members; };
// Every shard: this member (re)joins at clock; once all acknowledged, member_added(rank).
struct add_to_shards { std::uint32_t rank; std::int64_t clock; };
// Every shard: this member left.
struct remove_from_shards { std::uint32_t rank; };
// Every shard: the ssp bound leaves this member out (slow) or takes it back (Note [Naming
// stragglers] in core/job_stragglers.cpp).
struct name_straggler { std::uint32_t rank; bool slow; };
// This member: extra rows, a lost worker's samples (Note [Dealing a lost worker's
// samples] in core/sample_deal.hpp); it answers with on_rows_answer.
struct grant_rows { std::uint32_t rank; rows_grant grant; };
// This member: keep fewer (or again all) of its own rows a step (Note [Balancing shares]);
// it answers with on_rows_answer.
struct shed_rows { std::uint32_t rank; rows_shed shed; };
// Every shard's statistics (and with_params, its parameter snapshot), each answer to
// on_stats / on_snapshot with this id.
struct gather { std::uint64_t id; bool with_params; };
// Score the full parameter vector on the test set; answer with on_evaluated.
struct evaluate { std::int32_t epoch; tensor params; };
// Forward a local group's id, as the coordinator, to these members.
struct relay_group_id { std::vector<std::uint32_t> to; group_id id; };
struct epoch_closed { epoch_summary summary; };
// Something an operator should read (a member lost, a group formed, a replacement).
struct note { std::string text; };
// Every shard, and these members: take a checkpoint at `step` too (--checkpoint-seconds;
// Note [Checkpoint steps]). The members are the stages of replica 0 with no shard servers
// (they write the files), and every live member when the job keeps residuals (Note
// [Residuals in checkpoints] in core/residual_checkpoint.hpp).
struct request_checkpoint { std::int64_t step; std::vector<std::uint32_t> members; };
// Complete checkpoint `step` with the shards' files (commit_job_checkpoint); answer with
// checkpoint_committed. A key-value job's keys go in its state (Note [Key-value checkpoints]).
struct commit_checkpoint { std::int64_t step; std::vector<checkpoint_saved> shards; std::vector<kv_key_layout> keys; };
// The job is over: answer every run request with this and stop every member and shard
// (with the fault as the reason, so remote nodes can tell, or normally).
struct finish { std::variant<job_result, fault> outcome; };
// Before a finish that lost a node: write this record beside the checkpoints
// (write_loss_record; Note [Steps replayed] in core/loss_record.hpp).
struct record_loss { loss_record record; };
// In place of a finish: a shard server was lost and the job restarts in place from its
// newest checkpoint (Note [Restarting in place] in actors/coordinator_restart.cpp). Every member
// and shard stops with `restarting` and joins again; this core is finished, and the shell
// makes the next from the checkpoint.
// finished: the ranks that had finished, whose nodes have ended and will not join again
// (Note [A shard lost after training] in core/job_epochs.cpp): with any, only the job's
// end checkpoint can be restarted from.
struct restart { fault why; std::vector<std::uint32_t> finished; };
// A key-value job (core/job_keys.cpp). The shards named in `layout`: define the key's
// parts with their rows of `value`; once all acknowledged, defined(id), or
// define_failed(id, why).
struct define_on_shards { std::uint64_t id; kv_key_layout layout; tensor value; };
// Answer the init or lookup with ticket t.
struct answer_key { ticket t; kv_key_layout layout; };
// Every shard: this optimizer; once all acknowledged, answer ok to t.
struct set_optimizer_on_shards { ticket t; kv_set_optimizer opt; };
// Answer these barrier tickets with ok.
struct release { std::vector<ticket> tickets; };
// A key-value job lost shard `shard` (Note [Replacing a key-value shard] in
// core/job_shard_replacement.cpp): find the newest complete checkpoint, off the actor's
// thread, and answer with replacement_checkpoint.
struct find_shard_checkpoint { std::uint32_t shard; };
// The server that took shard `shard`'s place: start with these members (its key parts are
// restored first); once it acknowledged, shard_replaced(shard).
struct start_shard { std::uint32_t shard; membership members; };
// These members: shard `shard` is back at host:port (empty host: in this process), its
// keys as checkpoint `step` held them.
struct announce_shard { std::uint32_t shard; std::string host; std::uint16_t port; std::int64_t step; std::vector<std::uint32_t> to; };
}  // namespace job_actions

using job_action = std::variant<job_actions::welcome_shard, job_actions::welcome_member, job_actions::refuse,
                                job_actions::assign_rank, job_actions::start_shards, job_actions::add_to_shards,
                                job_actions::remove_from_shards, job_actions::name_straggler, job_actions::grant_rows, job_actions::shed_rows,
                                job_actions::gather, job_actions::evaluate,
                                job_actions::relay_group_id, job_actions::epoch_closed, job_actions::note,
                                job_actions::request_checkpoint, job_actions::commit_checkpoint,
                                job_actions::record_loss, job_actions::restart, job_actions::define_on_shards,
                                job_actions::answer_key, job_actions::set_optimizer_on_shards, job_actions::release,
                                job_actions::find_shard_checkpoint, job_actions::start_shard,
                                job_actions::announce_shard, job_actions::finish>;
using job_actions_list = std::vector<job_action>;

}  // namespace troupe
