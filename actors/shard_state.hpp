// shard_state: what one shard server actor keeps, and what its source files share:
// shard_server.cpp is the actor (the join, the welcome) and checks who sent each message;
// shard_membership.cpp takes the coordinator's word about members; shard_push.cpp and
// shard_pulls.cpp serve every job's pushes and pulls through shard_core, shard_train.cpp
// answers a training member's pulls with its slice, shard_kv*.cpp a user's loop's pulls
// of key parts and its collectives, shard_lane.cpp the bulk lanes, and
// shard_checkpoints.cpp the checkpoints of either kind of job. Private to those files.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "actors/protocol.hpp"
#include "actors/shard_server.hpp"
#include "base/serial_worker.hpp"
#include "core/collective_rounds.hpp"
#include "core/pull_views.hpp"
#include "core/shard_checkpoint.hpp"
#include "core/shard_core.hpp"
#include "core/shard_for.hpp"
#include "transport/lane.hpp"
#include "transport/shared_slots.hpp"
#include "transport/word_waiter.hpp"

namespace troupe::shard_shell {

using wall = std::chrono::system_clock;

// Where a member's push or pull is answered: its actor message's response promise, or the
// channel's doorbell it came through (Note [Doorbells] in transport/doorbell.hpp).
template <class T>
class answer_to {
 public:
  answer_to(caf::typed_response_promise<T> rp) : rp_(std::move(rp)) {}  // NOLINT: implicit by design
  explicit answer_to(std::function<void(caf::expected<T>)> bell) : bell_(std::move(bell)) {}
  void deliver(T x) {
    if (bell_)
      bell_(std::move(x));
    else
      rp_.deliver(std::move(x));
  }
  void deliver(caf::error e) {
    if (bell_)
      bell_(std::move(e));
    else
      rp_.deliver(std::move(e));
  }

 private:
  caf::typed_response_promise<T> rp_;
  std::function<void(caf::expected<T>)> bell_;
};

// A pull waiting for the parts its shard core held (shard_pulls.cpp).
struct held_pull {
  std::size_t waiting = 0;  // its parts still held
  wall::time_point since;
  kv_pull request;
  answer_to<kv_pull_reply> promise;
};

// A member's push, pull or key-value call, kept in the order it came while an earlier
// push of the member waits for its payload on the bulk lane (Note [Bulk lanes]).
struct waiting_call {
  std::uint64_t ticket = 0;               // the lane payload it needs; 0: none
  std::function<bool()> attempt;          // serves it; false while its payload is on its way
  std::function<void(caf::error)> fail;   // answers it with an error instead
};

// The shard's end of its members' bulk lanes, and what waits on them.
struct shard_lanes {
  std::shared_ptr<lane::shard_end> end;
  lane::rendezvous<std::monostate, lane::arrival> payloads;  // payloads that came before their messages
  struct queue {
    std::deque<waiting_call> calls;
    std::uint64_t overdue_set = 0;  // the ticket whose deadline is scheduled
  };
  std::map<std::uint32_t, queue> backlog;  // by member rank
  std::set<std::uint32_t> closed;          // members whose lane closed: a missing payload will not come
  std::set<std::pair<std::uint32_t, std::uint64_t>> overdue;  // payloads given up on (rank, ticket)
};

struct shard_state {
  std::unique_ptr<shard_core> core;  // a training job's (its stages' parts) or a key-value job's (key parts)
  std::uint32_t index = 0;
  shard_core::token next_token = 1;
  std::map<shard_core::token, std::uint64_t> held_tokens;  // a part the core holds -> its pull
  std::map<std::uint64_t, held_pull> held;
  std::uint64_t next_pull = 1;
  observability obs;
  std::optional<monitoring::shard_metrics> m;
  std::uint32_t track = 0;
  std::int64_t updates_seen = 0;
  std::vector<member_identity> members;  // by rank: the only actor that may push and pull as it
  std::optional<shm::worker_channels> channels;  // the same-host fast path; none when it is off
  // Note [Doorbells]: the bell blocks of the channels this shard answered into, by member
  // rank, and the thread that watches their requests (declared after `channels`, so it
  // stops before they are unmapped); `bells_rung_due` is set while a bells_rung is on its
  // way.
  std::map<std::uint32_t, std::set<std::byte*>> bells;
  std::shared_ptr<std::atomic<bool>> bells_rung_due = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<word_waiter> bell_waiter;
  // While it serves what was posted, the blocks it answered into (by member rank), woken
  // once at the end.
  bool serving_bells = false;
  std::set<std::pair<std::uint32_t, std::byte*>> bells_to_ring;
  std::set<std::uint32_t> bells_malformed_logged;  // members whose broken records were logged
  grad_codec compression, pull_precision;         // the job's, for pushes and for answers over the network
  std::optional<pull_views> views;                // --pull-precision 2bit: what each member holds
  // Collectives of a key-value job's members (Note [Collectives on the shards]).
  collective_rounds collectives;
  struct waiting_piece {
    caf::typed_response_promise<kv_collective_reply> promise;
    std::uint32_t worker = 0;
    shared_tensor reply_to;  // the member's slot for the answer (the same-host fast path), if any
    bool wants_data = true;  // false: a broadcast's root, which has the values
    std::uint64_t lane_reply = 0;  // the ticket to answer under on the member's bulk lane, if it asked
  };
  std::map<collective_rounds::token, waiting_piece> collective_promises;
  collective_rounds::token next_collective = 1;
  std::optional<shard_lanes> lanes;               // none: every tensor travels in its message
  std::chrono::milliseconds request_timeout{300000};  // the job's: how long a push's payload may take
  coordinator_actor coordinator;
  // Checkpoints (Note [Checkpoint steps]): the job's plan, what the files say they are, and
  // the thread that writes them; none when the job keeps no checkpoints.
  checkpoint_plan checkpoints;
  checkpoint_identity checkpoint_id;
  std::unique_ptr<serial_worker> writer;
  std::optional<shard_welcome> resume;  // a resumed job's welcome, until the start restores it
  static inline const char* name = "troupe.shard_server";
};

using shard_pointer = local_shard_actor::stateful_pointer<shard_state>;

// The shard has joined a key-value job: its core holds key parts, not a model's stages.
inline bool serves_kv(shard_pointer self) { return self->state.core && !self->state.core->training(); }
// The shard has joined a training job.
inline bool serves_training(shard_pointer self) { return self->state.core && self->state.core->training(); }

// The coordinator's word about the job's members (shard_membership.cpp), after
// shard_server.cpp checked that the coordinator sent it: member rank's identity (the only
// actor that may push and pull as it), an admission, the start, a leave, a straggler's
// name, and the statistics and snapshot the coordinator gathers.
void record_member(shard_pointer self, std::uint32_t rank, member_identity who);
caf::result<caf::ok_atom> on_admit(shard_pointer self, shard_admit& a);
caf::result<caf::ok_atom> on_start(shard_pointer self, shard_start& s);
void on_left(shard_pointer self, std::uint32_t rank);
void on_straggler(shard_pointer self, std::uint32_t rank, bool slow);
caf::result<shard_stats> stats_of(shard_pointer self);
caf::result<params_reply> snapshot(shard_pointer self);

// Answers both sides give (shard_server.cpp).
caf::error not_started(shard_pointer self);
caf::error wrong_shard(shard_pointer self, std::uint32_t asked);

// Every job's push (shard_push.cpp), called once the shell checked that the member the
// message names sent it: false while its lane payload is on its way (nothing answered yet).
bool serve_push(shard_pointer self, kv_push& p, answer_to<kv_push_ack>& rp);
// Every job's pull (shard_pulls.cpp), called likewise: answered now, or held until the
// core has released every part it holds. settle_pulls answers the held pulls the core
// released and fails those it dropped (their member left), after each call into the core.
void serve_pull(shard_pointer self, kv_pull& r, answer_to<kv_pull_reply>& rp);
void settle_pulls(shard_pointer self);

// A training job's side (shard_train.cpp): what a training member's message hears from a
// shard that is not a training job's; what is wrong with a training member's pull (its
// part, its piece); its answer, the member's slice or a piece of it as it is now.
caf::error not_training(shard_pointer self);
// What is wrong with the parts a training member's push or pull names (it names one, the
// part of its stage), or "".
std::string wrong_step_parts(const shard_core& core, std::uint32_t worker, const std::vector<kv_part_id>& parts);
std::optional<fault> check_step_pull(shard_pointer self, const kv_pull& r);
kv_pull_reply slice_answer(shard_pointer self, const kv_pull& r);
// Brings the gauges and counters in line with the core after a message.
void observe(shard_pointer self);

// The key-value side (shard_kv.cpp, shard_kv_pulls.cpp, shard_kv_collectives.cpp). Each
// handler runs after the shell checked that the coordinator (define, optimizer) or the
// member the message names (push, pull, collective) sent it.
void init_kv_from_welcome(shard_pointer self, const shard_welcome& w);
// What a key-value message hears from a shard that is not a key-value job's; why a push's
// or a pull's parts are not all on this shard.
caf::error not_kv(shard_pointer self);
std::optional<fault> check_kv_parts(const shard_core& kv, const std::vector<kv_part_id>& parts);
// Answers the held pulls (settle_pulls) and the collective pieces whose rounds closed or
// failed (settle_collectives).
void settle_kv(shard_pointer self);
void settle_collectives(shard_pointer self);
// Key-value members: the job's start, a joiner, a leaver (the kv core and the collectives).
void kv_members_start(shard_pointer self, const std::vector<std::uint32_t>& members);
void kv_member_joined(shard_pointer self, std::uint32_t rank);
void kv_member_left(shard_pointer self, std::uint32_t rank);
// A member's piece of a collective: false while its lane payload is on its way (nothing
// answered yet).
bool kv_collective_on(shard_pointer self, kv_collective& c, caf::typed_response_promise<kv_collective_reply>& rp);
caf::result<caf::ok_atom> kv_define_parts(shard_pointer self, const kv_define& d);
caf::result<caf::ok_atom> kv_set_optimizer_on(shard_pointer self, const kv_set_optimizer& o);
// A user's loop's pull (shard_kv_pulls.cpp): what is wrong with it (its parts, its rows);
// its answer, the parts and rows it names as they are now.
std::optional<fault> check_kv_pull(const shard_core& kv, const kv_pull& r);
kv_pull_reply kv_answer(shard_pointer self, const kv_pull& r);

// Checkpoints (shard_checkpoints.cpp). At the welcome: the job's plan, and what a resumed
// job's shard restores at its start; why the job cannot keep checkpoints.
std::optional<std::string> plan_checkpoints(shard_pointer self, const shard_welcome& w);
// At the start: the state the welcome named, restored (Note [Shard checkpoints]); why not.
std::optional<std::string> restore_checkpoint(shard_pointer self);
// After a call into the core: the checkpoint it made due is copied now and written off
// this thread (Note [Checkpoint steps]).
void maybe_checkpoint(shard_pointer self);
// The writer's word about a file, passed on to the coordinator.
void on_checkpoint_written(shard_pointer self, const checkpoint_saved& s);

// Doorbells (shard_bells.cpp, Note [Doorbells]): after answering member rank in the slot
// `reply_to` names, watches that channel's requests (once); serves what was posted to the
// watched bell blocks; stops watching a member's blocks inside one mapping (nullptr: all
// of them), before that is unmapped.
void watch_bell(shard_pointer self, std::uint32_t rank, const shared_tensor& reply_to);
void on_bells_rung(shard_pointer self);
void unwatch_bells(shard_pointer self, std::uint32_t rank, const std::byte* segment, std::size_t bytes);

// The bulk lanes (shard_lane.cpp, Note [Bulk lanes]).
// Serves member rank's call now when nothing of the member waits, else after what waits.
void in_order(shard_pointer self, std::uint32_t rank, waiting_call call);

// A member's message `msg`, served in the member's order by serve(self, msg, promise): a
// push's serve returns false while the payload of `ticket` is on its way (0: none); the
// answer goes through the promise, whose result the handler returns.
// `rp` is a response promise or an answer_to.
template <class Msg, class Serve, class Answer>
void in_member_order_to(shard_pointer self, std::uint32_t rank, std::uint64_t ticket, Msg msg, Answer rp,
                        Serve serve) {
  in_order(self, rank,
           {ticket,
            [=, msg = std::move(msg)]() mutable {
              if constexpr (std::is_same_v<decltype(serve(self, msg, rp)), bool>)
                return serve(self, msg, rp);
              else
                return serve(self, msg, rp), true;
            },
            [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
}
template <class Reply, class Msg, class Serve>
caf::result<Reply> in_member_order(shard_pointer self, std::uint32_t rank, std::uint64_t ticket, Msg msg,
                                   Serve serve) {
  auto rp = self->make_response_promise<Reply>();
  if constexpr (std::is_invocable_v<Serve, shard_pointer, Msg&, answer_to<Reply>&>)
    in_member_order_to(self, rank, ticket, std::move(msg), answer_to<Reply>(rp), serve);
  else
    in_member_order_to(self, rank, ticket, std::move(msg), rp, serve);
  return rp;
}
// A message's lane payload: taken and shaped as the descriptor says, `missing` while it is
// on its way, or what is wrong (it will not come, or does not fit).
struct claimed {
  std::optional<tensor> payload;
  std::string problem;
  bool finite = false;  // the lane reader found the payload free of NaN and Inf (Note [Scanned on arrival])
  bool missing() const { return !payload && problem.empty(); }
};
claimed claim_payload(shard_pointer self, std::uint32_t rank, const lane_tensor& d);
// Sends `t` to member rank on its lane under `ticket` when the member asked (ticket > 0)
// and its lane is open (Note [Bulk lanes]); then the descriptor for the reply. Else t stays.
std::optional<lane_tensor> answer_on_lane(shard_pointer self, std::uint32_t rank, std::uint64_t ticket, tensor& t);
// Events of the lanes and of their members.
void on_lane_payload(shard_pointer self, lane_payload& p);
void on_lane_closed(shard_pointer self, std::uint32_t rank, const std::string& why);
void on_lane_overdue(shard_pointer self, std::uint32_t rank, std::uint64_t ticket);
caf::result<lane_offer> offer_lane(shard_pointer self, std::uint32_t rank);
// Member rank left: its lane closes and what it left waiting is answered not_member.
void forget_lane(shard_pointer self, std::uint32_t rank);

}  // namespace troupe::shard_shell
