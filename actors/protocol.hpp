// Troupe's actor protocol in one place: every atom; the typed interfaces each role
// publishes to other nodes, and the local triggers only its own process may send it; the
// welcome a member gets; the CAF error category for errc; and the type-ID block with
// add_protocol_types(), which every node calls before building its actor system.
//
// Note [Type IDs and local triggers]
// Every message type that may cross the wire is in the `troupe_protocol` type-ID block and
// registered under its C++ name; the build defines CAF_ENABLE_TYPE_ID_CHECKS, so sending
// a type that is not in the block does not compile (CAF 0.17 would otherwise send an
// empty message). Local triggers (join now, the watchdog's tick, the next step, a retry,
// a deadline, the run request) are structs allowed as unsafe message types and never
// registered: another node cannot even encode them, and they are not part of the
// published interfaces. Each actor's local handle (local_*_actor) extends its published
// interface with its triggers; only the published one is given to other nodes.
//
// Note [Members are identities]
// A message's fields say which rank or shard it claims to come from; CAF tells who sent
// it. Every receiver checks the second against what the coordinator recorded when the
// member joined, and refuses the message (counting it, troupe_refusals_total, and telling
// the sender nothing about the job) when they disagree:
// - the coordinator takes progress, epoch, done and group reports only from the actor
//   that holds the rank they name;
// - a shard takes start, admit, leave, snapshot and statistics requests only from its
//   coordinator, and a push or pull only from the actor that holds the rank it names
//   (shard_start and shard_admit carry each member's member_identity);
// - a stage takes activations only from its neighbours, its previous stage's hello only
//   from the actor the welcome names (prev_identity), and local group ids only from the
//   coordinator.
// The sender is only as trustworthy as the transport: with TLS only holders of a job
// certificate can send at all; docs/DESIGN.md says what such a holder can still claim.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/wire.hpp"
#include "base/errc.hpp"
#include "core/job_checkpoint.hpp"
#include "core/messages.hpp"

namespace troupe {

// ---------------------------------------------------------------------------------------
// Atoms (CAF 0.17: at most 10 characters)

using push_atom = caf::atom_constant<caf::atom("push")>;
using pull_atom = caf::atom_constant<caf::atom("pull")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using left_atom = caf::atom_constant<caf::atom("left")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using epoch_atom = caf::atom_constant<caf::atom("epoch")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using eval_atom = caf::atom_constant<caf::atom("eval")>;
using activation_atom = caf::atom_constant<caf::atom("activation")>;
using act_grad_atom = caf::atom_constant<caf::atom("actgrad")>;
using group_atom = caf::atom_constant<caf::atom("group")>;
using hello_atom = caf::atom_constant<caf::atom("stagehello")>;
using kv_init_atom = caf::atom_constant<caf::atom("kvinit")>;
using kv_lookup_atom = caf::atom_constant<caf::atom("kvlookup")>;
using kv_define_atom = caf::atom_constant<caf::atom("kvdefine")>;
using kv_opt_atom = caf::atom_constant<caf::atom("kvopt")>;
using kv_barrier_atom = caf::atom_constant<caf::atom("kvbarrier")>;
using kv_coll_atom = caf::atom_constant<caf::atom("kvcoll")>;
using kv_back_atom = caf::atom_constant<caf::atom("kvback")>;
using lane_open_atom = caf::atom_constant<caf::atom("laneopen")>;
using checkpoint_atom = caf::atom_constant<caf::atom("ckpt")>;
using straggler_atom = caf::atom_constant<caf::atom("straggler")>;
using rows_atom = caf::atom_constant<caf::atom("rows")>;
using ring_atom = caf::atom_constant<caf::atom("ring")>;

// ---------------------------------------------------------------------------------------
// Errors

inline caf::error make_error(errc x) { return caf::error(static_cast<std::uint8_t>(x), caf::atom("troupe")); }
inline caf::error make_error(errc x, std::string detail) {
  return caf::error(static_cast<std::uint8_t>(x), caf::atom("troupe"), caf::make_message(std::move(detail)));
}
inline caf::error make_error(const fault& f) { return make_error(f.code, f.detail); }
// The errc of a Troupe error; nullopt for CAF's own errors.
std::optional<errc> troupe_code(const caf::error& e);
// The code and detail of a Troupe error; nullopt for CAF's own errors.
std::optional<fault> as_fault(const caf::error& e);
// "not_finite: gradient holds NaN..." for Troupe errors, CAF's rendering for the others.
std::string describe(const caf::error& e);
// What a coordinator of a training job answers a key-value call.
caf::error not_a_kv_job();

// ---------------------------------------------------------------------------------------
// Local triggers (Note [Type IDs and local triggers])

// Join the coordinator, telling it where this actor is reached (empty host: one process)
// and proving the job's secret (Note [Join proofs] in net/job_secret.hpp; empty: none).
struct join_trigger {
  std::string host;
  std::uint16_t port = 0;
  std::string proof;
};
struct watchdog_tick {};     // the coordinator, to itself, about once a second
struct run_request {};       // this process waits for the job's result
struct next_step {};         // a member with nothing to pull, to itself
struct connect_retry {       // a member, to itself: try connecting to `peer` again
  std::string peer;
};
struct hello_deadline {};    // a member, to itself: its previous stage should have said hello
struct group_deadline {};    // a member, to itself: its local group's id should have come
struct ring_drain {};        // a member, to itself: try again to pass the ring pieces that wait for mailbox room
// Bulk lanes (Note [Bulk lanes] in transport/lane.hpp), from the lane's threads to the actor
// whose lane it is; `peer` is the member's rank on a shard, the shard's index on a member,
// a replica on a member's ring lanes (Note [Ring lanes] in core/ring_lanes.cpp).
enum class lane_side : std::uint8_t {
  shards,    // a shard's lanes from its members, or a member's to its shards
  ring_in,   // a member's lane from its previous replica in the ring
  ring_out,  // a member's lane to its next replica in the ring
};
struct lane_payload {        // a payload read off the lane
  std::uint32_t peer = 0;
  std::uint64_t ticket = 0;
  tensor data;
  bool finite = false;       // scanned free of NaN and Inf (Note [Scanned on arrival] in transport/lane.hpp)
  lane_side side = lane_side::shards;
};
struct lane_event {          // the lane to `peer` opened, or closed (why: what happened)
  std::uint32_t peer = 0;
  bool opened = false;
  std::string why;
  lane_side side = lane_side::shards;
};
struct lane_overdue {        // a shard, to itself: the payload of this push should have come
  std::uint32_t peer = 0;
  std::uint64_t ticket = 0;
};
struct checkpoint_written {  // a writer thread (a shard's, or a member's that holds the parameters), to its actor: this file is written, or not
  checkpoint_saved saved;
};
struct checkpoint_committed {  // the coordinator, to itself: this checkpoint is complete, or why not
  std::int64_t step = 0;
  std::optional<std::string> error;
};
// The coordinator, to itself (Note [Restarting in place] in actors/coordinator_restart.cpp): where
// the job restarts from (none: from its beginning), or why it cannot.
struct restart_ready {
  std::optional<resume_point> from;
  std::optional<fault> error;
};
// The coordinator, to itself (Note [Replacing a key-value shard] in
// core/job_shard_replacement.cpp): the checkpoint a lost shard's replacement restores, or
// why there is none.
struct replacement_found {
  std::optional<resume_point> from;
  std::string error;
};
struct park_deadline {};  // a parked member, to itself: the coordinator has not restarted the job
// Doorbells (Note [Doorbells] in transport/doorbell.hpp), from the word waiter's thread to its
// actor: requests were posted to a shard's bell blocks, answers to a member's; and a
// member, to itself: look for calls through the doorbell past their deadline.
struct bells_rung {};
struct bells_answered {};
struct bell_deadline {};

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::join_trigger)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::watchdog_tick)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::run_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::next_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::connect_retry)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::hello_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::group_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::ring_drain)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::checkpoint_written)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::checkpoint_committed)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::restart_ready)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::replacement_found)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::park_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::bells_rung)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::bells_answered)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::bell_deadline)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::lane_payload)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::lane_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::lane_overdue)


namespace troupe {

// ---------------------------------------------------------------------------------------
// Identities (Note [Members are identities])

// The actor a member joined the coordinator from: its node and its id on that node. Only
// that actor may act as the member's rank; an empty identity matches no one.
struct member_identity {
  caf::node_id node;
  caf::actor_id id = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_identity& x) {
  return f(caf::meta::type_name("member_identity"), x.node, x.id);
}

member_identity identity_of(const caf::strong_actor_ptr& actor);
// True when `sender` is the actor `who` names (never for an empty identity or sender).
bool sent_by(const caf::strong_actor_ptr& sender, const member_identity& who);

// Coordinator -> shard: start with these members; identities[i] is members.workers[i]'s.
struct shard_start {
  membership members;
  std::vector<member_identity> identities;
};

// Coordinator -> shard: this member (re)joins, from this actor.
struct shard_admit {
  member_joined joined;
  member_identity identity;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_start& x) {
  return f(caf::meta::type_name("shard_start"), x.members, x.identities);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_admit& x) {
  return f(caf::meta::type_name("shard_admit"), x.joined, x.identity);
}

// ---------------------------------------------------------------------------------------
// Typed interfaces

using shard_actor = caf::typed_actor<
    caf::replies_to<start_atom, shard_start>::with<caf::ok_atom>,
    // every job's push (a training member's states its clock)
    caf::replies_to<push_atom, kv_push>::with<kv_push_ack>,
    // every job's pull (a training member's states its clock)
    caf::replies_to<pull_atom, kv_pull>::with<kv_pull_reply>,
    caf::replies_to<snapshot_atom>::with<params_reply>,
    caf::replies_to<stats_atom>::with<shard_stats>,
    caf::reacts_to<left_atom, std::uint32_t>,
    caf::replies_to<join_atom, shard_admit>::with<caf::ok_atom>,
    caf::reacts_to<checkpoint_atom, std::int64_t>,  // take a checkpoint at this step too (--checkpoint-seconds)
    caf::reacts_to<straggler_atom, std::uint32_t, bool>,  // ssp: leave this member out of the bound, or not
    // key-value jobs
    caf::replies_to<kv_define_atom, kv_define>::with<caf::ok_atom>,
    caf::replies_to<kv_opt_atom, kv_set_optimizer>::with<caf::ok_atom>,
    // a member's piece of a collective (Note [Collectives on the shards])
    caf::replies_to<kv_coll_atom, kv_collective>::with<kv_collective_reply>,
    // a member's bulk lane (Note [Bulk lanes]): the member's rank -> an offer
    caf::replies_to<lane_open_atom, std::uint32_t>::with<lane_offer>>;
using local_shard_actor =
    shard_actor::extend<caf::reacts_to<join_trigger>, caf::reacts_to<lane_payload>, caf::reacts_to<lane_event>,
                        caf::reacts_to<lane_overdue>, caf::reacts_to<checkpoint_written>, caf::reacts_to<bells_rung>>;

// What pipeline neighbours and the coordinator's relay send a member.
using stage_actor = caf::typed_actor<
    caf::reacts_to<activation_atom, activation>,
    caf::reacts_to<act_grad_atom, activation_grad>,
    caf::reacts_to<hello_atom, stage_hello>,
    caf::reacts_to<group_atom, group_id>,
    caf::reacts_to<rows_atom, rows_grant>,  // from the coordinator: a lost worker's samples
    caf::reacts_to<rows_atom, rows_shed>,   // from the coordinator: train fewer of its own rows
    caf::reacts_to<ring_atom, ring_piece>,   // --mode allreduce: from the previous replica in the ring
    caf::reacts_to<ring_atom, stage_hello>,   // across nodes: "I am your ring neighbour"
    caf::reacts_to<ring_atom, ring_mailbox_offer>,  // one host: "my pieces come through this mailbox"
    // between hosts, from the previous replica: where its ring lane may connect (Note [Ring lanes])
    caf::replies_to<ring_atom, lane_open_atom>::with<lane_offer>,
    caf::reacts_to<checkpoint_atom, std::int64_t>>;  // from the coordinator: a checkpoint at this step too
using local_stage_actor =
    stage_actor::extend<caf::reacts_to<join_trigger>, caf::reacts_to<next_step>, caf::reacts_to<connect_retry>,
                        caf::reacts_to<hello_deadline>, caf::reacts_to<group_deadline>, caf::reacts_to<lane_payload>,
                        caf::reacts_to<lane_event>, caf::reacts_to<ring_drain>, caf::reacts_to<checkpoint_written>,
                        caf::reacts_to<park_deadline>, caf::reacts_to<bells_answered>, caf::reacts_to<bell_deadline>>;

// Coordinator -> member: its place in the job, and in one process the handles of its
// shards (indexed by shard) and pipeline neighbours (invalid at the ends), which across
// nodes it reaches by the addresses in `place` (Note [Shard handles across nodes]).
// prev_identity: the previous stage's actor, the only one whose hello wires it.
// ring_prev, ring_next: --mode allreduce, the same stage of the previous and the next
// replica (Note [Ring all-reduce of gradients] in core/member_ring.cpp): handles in one
// process; across nodes the actors whose hellos wire them.
struct worker_welcome {
  member_assignment place;
  std::vector<shard_actor> shards;
  stage_actor prev, next;
  member_identity prev_identity;
  stage_actor ring_prev, ring_next;
  member_identity ring_prev_identity, ring_next_identity;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_welcome& x) {
  return f(caf::meta::type_name("worker_welcome"), x.place, x.shards, x.prev, x.next, x.prev_identity, x.ring_prev,
           x.ring_next, x.ring_prev_identity, x.ring_next_identity);
}

// Coordinator -> a key-value job's members: shard `shard`, lost, is back (Note [Replacing a
// key-value shard] in core/job_shard_replacement.cpp), at host:port (across nodes) or
// by `handle` (in one process; empty across nodes, Note [Shard handles across nodes]), its
// keys as checkpoint `step` held them.
struct kv_shard_back {
  std::uint32_t shard = 0;
  std::string host;
  std::uint16_t port = 0;
  std::int64_t step = 0;
  std::vector<shard_actor> handle;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_shard_back& x) {
  return f(caf::meta::type_name("kv_shard_back"), x.shard, x.host, x.port, x.step, x.handle);
}

using coordinator_actor = caf::typed_actor<
    caf::replies_to<join_atom, shard_join>::with<shard_welcome>,
    caf::replies_to<join_atom, worker_join>::with<worker_welcome>,
    caf::reacts_to<progress_atom, step_report>,
    caf::reacts_to<epoch_atom, worker_epoch>,
    caf::reacts_to<done_atom, worker_done>,
    caf::reacts_to<group_atom, group_id>,
    caf::reacts_to<checkpoint_atom, checkpoint_saved>,
    caf::reacts_to<checkpoint_atom, checkpoint_begun>,  // a key-value shard writes its file of that step
    caf::reacts_to<rows_atom, rows_answer>,  // a member took or returned a grant of rows
    // key-value jobs (a training job refuses them)
    caf::replies_to<kv_init_atom, kv_init>::with<kv_key_layout>,
    caf::replies_to<kv_lookup_atom, kv_lookup>::with<kv_key_layout>,
    caf::replies_to<kv_opt_atom, kv_set_optimizer>::with<caf::ok_atom>,
    caf::replies_to<kv_barrier_atom, kv_barrier>::with<caf::ok_atom>>;
using local_coordinator_actor =
    coordinator_actor::extend<caf::replies_to<run_request>::with<job_result>, caf::reacts_to<watchdog_tick>,
                              caf::reacts_to<checkpoint_committed>, caf::reacts_to<restart_ready>,
                              caf::reacts_to<replacement_found>>;

// Spawned by the coordinator in its own process; never published.
using evaluator_actor = caf::typed_actor<caf::replies_to<eval_atom, eval_request>::with<eval_reply>>;

// Registers every message type of the troupe_protocol block (under the same names on
// every node) and the "troupe" error category.
void add_protocol_types(caf::actor_system_config& cfg);

}  // namespace troupe

CAF_BEGIN_TYPE_ID_BLOCK(troupe_protocol, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::params_reply))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::membership))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::shard_stats))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::shard_join))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::shard_welcome))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::worker_join))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::worker_welcome))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::member_joined))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::shard_start))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::shard_admit))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::group_id))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::stage_hello))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::activation))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::activation_grad))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::step_report))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::worker_epoch))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::worker_done))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::eval_request))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::eval_reply))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::job_result))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_key_layout))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_init))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_lookup))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_define))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_set_optimizer))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_barrier))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_push))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_push_ack))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_pull))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_pull_reply))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_collective))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_collective_reply))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::lane_offer))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::checkpoint_saved))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::checkpoint_begun))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::rows_grant))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::rows_shed))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::rows_answer))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::ring_piece))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::ring_mailbox_offer))
  CAF_ADD_TYPE_ID(troupe_protocol, (troupe::kv_shard_back))
CAF_END_TYPE_ID_BLOCK(troupe_protocol)
