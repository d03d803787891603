// The state of one pipeline_stage actor and what its two source files share:
// pipeline_stage.cpp decodes messages for member_core and carries out its actions,
// member_wiring.cpp connects the member to its shards and its pipeline neighbours.
// Private to those two files.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "actors/pipeline_stage.hpp"
#include "actors/protocol.hpp"
#include "actors/stage_links.hpp"
#include "base/serial_worker.hpp"
#include "core/member_core.hpp"
#include "core/ring_handshake.hpp"

namespace troupe::stage_shell {

struct stage_state {
  std::unique_ptr<member_core> core;
  coordinator_actor coordinator;
  stage_options opts;
  std::vector<shard_actor> shards;  // by index
  // Its links to them (transport/shard_links.hpp), shared with the core, which asks them
  // where to pack its pushes: wired with the shards, before the first call.
  std::shared_ptr<shard_links> links = std::make_shared<shard_links>();
  stage_slot_calls slots;
  // Its doorbells (Note [Doorbells]), made at its first call through one; declared after
  // the links, so its waiter stops before their segments go.
  std::unique_ptr<member_bells> bells;
  // The bulk lanes to shards on other hosts (Note [Bulk lanes]): made at the first pull
  // when the node has a lane end; replies wait here for their payloads.
  std::optional<lane::lanes_to_shards> lanes;
  stage_actor prev, next;           // pipeline neighbours (invalid at the ends)
  // --mode allreduce: the same stage of the previous and the next replica (invalid
  // without a ring); pieces come from ring_prev and go to ring_next.
  stage_actor ring_prev, ring_next;
  stage_ring_mailboxes mailboxes;
  stage_ring_lanes ring_lanes;
  // Wiring: pending connects by peer, the wait for the previous stage's hello, and a
  // hello that came before the welcome.
  std::map<std::string, std::function<void()>> retries;
  std::function<void()> on_prev_hello;
  member_identity prev_identity;    // the only actor whose hello wires the previous stage
  std::optional<std::pair<stage_actor, stage_hello>> early_hello;
  // The ring across nodes (ring_wiring.cpp): who the welcome says the ring neighbours
  // are, the waits for their hellos, and hellos that came before the welcome.
  member_identity ring_prev_identity, ring_next_identity;
  std::optional<ring_handshake> ring_wiring;  // Note [Ring connections] in core/ring_handshake.hpp
  std::function<void()> ring_step_done;         // a step of it is done (the member's wiring counts them)
  std::vector<std::pair<stage_actor, stage_hello>> early_ring_hellos;
  // Until the member trains (a neighbour may start first and send at once), stage
  // tensors and ring pieces wait here with their senders, and are checked when training
  // starts.
  std::vector<std::pair<caf::actor_addr, std::variant<activation, activation_grad, ring_piece>>> early;
  bool training = false;  // the member trains: stage tensors go to the core, not to `early`
  // Note [Parked members] (stage_parking.cpp): the shard's loss this member waits with
  // for the coordinator's restart; while set, nothing reaches the core.
  std::optional<fault> parked;
  std::set<std::uint32_t> pushes_pieces;  // shards this member has pushed a gradient piece to (for the log)
  // Note [Members' checkpoints] (stage_checkpoints.cpp): the thread that writes this
  // member's files, made with the first; how many are on their way; what waits for them.
  std::unique_ptr<serial_worker> writer;
  std::size_t checkpoints_writing = 0;
  std::function<void()> once_written;
  static inline const char* name = "troupe.pipeline_stage";
};

using stage_pointer = local_stage_actor::stateful_pointer<stage_state>;

// "worker 3" or "stage 1 of replica 0" once welcomed; "a member" before.
std::string who(stage_pointer self);
// The job's --request-timeout, for every request this member sends.
inline std::chrono::milliseconds request_timeout(stage_pointer self) {
  return std::chrono::milliseconds(self->state.core->place().job.request_timeout_ms);
}
// Logs e and stops the member with it; or parks it (Note [Parked members]).
void fail(stage_pointer self, const fault& e);
// stage_parking.cpp (Note [Parked members]): parks the member if e is a loss its job
// restarts from in place (true), or was parked already; a parked member's wait is over:
// it stops with the shard's loss.
bool park(stage_pointer self, const fault& e);
void on_park_deadline(stage_pointer self);
// Carries out the core's actions; once the core trains, sets `training` and replays the
// early stage tensors (stage_actions.cpp).
void carry_out(stage_pointer self, member_actions_list actions);
// pipeline_stage.cpp: the core trains now; replays what came early.
void start_training(stage_pointer self);

// Group ids, grants or sheds of rows and checkpoint requests come only from the
// coordinator; anything else is refused, counted and logged once per peer (`what`: the
// message, for the log).
bool from_the_coordinator(stage_pointer self, const char* what);

// Calls the core and carries out what it returns. The core guards its compute calls one
// by one; this is the net under them: an exception that still escapes stops the member
// with compute_failed instead of reaching CAF.
template <class F>
void drive(stage_pointer self, F&& call) {
  if (self->state.parked) return;
  member_actions_list actions;
  try {
    actions = call(*self->state.core);
  } catch (const std::exception& e) {
    fail(self, {errc::compute_failed, who(self) + ": " + e.what()});
    return;
  }
  carry_out(self, std::move(actions));
}

// stage_fast_path.cpp (Note [Same-host fast path]): a pull offers the reply slot its links
// lend for shard s, if any; a push leaves its gradient in a push slot when its links route
// it there. Each returns whether it lent a slot, which settle_* then gives back: `answered`
// in the message (the shard declined), or `timed_out` (the channel closes).
bool offer_reply_slot(stage_pointer self, std::uint32_t s, kv_pull& r);
// The parameters the shard left in the lent slot, moved into p.params.
expected<bool> take_shared_reply(stage_pointer self, std::uint32_t s, kv_pull_reply& p);
void settle_reply_slot(stage_pointer self, std::uint32_t s, bool answered_inline, bool timed_out);
bool share_push(stage_pointer self, std::uint32_t s, kv_push& g);
void settle_push_slot(stage_pointer self, std::uint32_t s, bool timed_out);
// member_wiring.cpp: the links to the shards the welcome named (in this process, in
// another, or not called by this member).
void wire_links(stage_pointer self);
// stage_bells.cpp (Note [Doorbells]): sends a pull or a push to shard s through the bell
// block of the channel whose slot it lent, when the shard listens there; false: send it
// as an actor message. The answer, or the request timeout, goes to the handlers. Then the
// answers the waiter saw, and the calls past their deadline.
bool ring_pull(stage_pointer self, std::uint32_t s, const kv_pull& r, std::function<void(kv_pull_reply&)> ok,
               std::function<void(caf::error&)> failed);
bool ring_push(stage_pointer self, std::uint32_t s, const kv_push& g, std::function<void(kv_push_ack&)> ok,
               std::function<void(caf::error&)> failed);
void on_bells_answered(stage_pointer self);
void on_bell_deadline(stage_pointer self);
// Wakes the shards posted to since the last call, once each: the shell calls it after
// carrying out a list of actions, so a step's push and pull reach a shard in one wake-up.
void ring_bells(stage_pointer self);
// Waits on this thread for the answers to the calls in flight, and takes them, while the
// member has nothing else to do (Note [Waiting for the answers]); a call from inside one
// of their handlers returns at once.
void await_answers(stage_pointer self);

// stage_lane.cpp (Note [Bulk lanes]): the book of lanes, made at the first call; a call to
// shard s routed over its lane (member_lanes::route: it may first ask s for one): a pull
// gets the ticket its answer comes under (0: in the message), a push's gradient moves onto
// the open lane; a reply that names a lane payload, handed to the core once the payload is
// here; and the lane's events.
std::uint64_t route_on_lane(stage_pointer self, std::uint32_t s, kv_pull& r);
void route_on_lane(stage_pointer self, std::uint32_t s, kv_push& g);
// `asked`: the ticket the pull named (0: none), which the reply must name.
void on_lane_reply(stage_pointer self, std::uint32_t s, std::uint64_t asked, kv_pull_reply p);
void abandon_lane_reply(stage_pointer self, std::uint32_t s, std::uint64_t ticket);
void on_lane_payload(stage_pointer self, lane_payload& p);
void on_lane_event(stage_pointer self, const lane_event& e);

// stage_ring_mailbox.cpp (Note [Ring mailboxes]): sends a ring piece to ring_next,
// through the outbox of its ring link when it can (offering it first); takes an offer or
// its answer; and fills a piece from ring_prev that names the inbox (false: the member
// failed, naming why).
void pass_ring_piece(stage_pointer self, ring_piece p);
// Passes on the pieces that waited for room, while there is room (ring_drain, and after
// every piece that comes).
void drain_ring_pieces(stage_pointer self);
// Calls `then` once no ring piece waits for mailbox room and the ring lane has written
// every piece sent on it (now, if so).
void after_ring_pieces(stage_pointer self, std::function<void()> then);
void on_ring_mailbox(stage_pointer self, const caf::actor_addr& sender, const ring_mailbox_offer& m);
bool fill_ring_piece(stage_pointer self, ring_piece& p);

// stage_ring_lane.cpp (Note [Ring lanes]): asks ring_next for a lane (when it is on
// another node and no mailbox carries the pieces); sends a piece on the lane when it is
// open (else the piece goes in its message as it is); whether every piece sent on it has
// left for the socket (a member finishes only then); answers ring_prev's ask with an
// offer; takes a piece from ring_prev, in order, once its payload is here, to the core;
// and the ring lanes' payloads and events.
void ask_ring_lane(stage_pointer self);
void onto_ring_lane(stage_pointer self, ring_piece& p);
bool ring_lane_flushed(stage_pointer self);
caf::result<lane_offer> on_ring_lane_ask(stage_pointer self, const caf::actor_addr& sender);
void answer_early_ring_lane_ask(stage_pointer self);
void take_ring_piece_in_order(stage_pointer self, ring_piece p);
void on_ring_lane_payload(stage_pointer self, lane_payload& p);
void on_ring_lane_event(stage_pointer self, const lane_event& e);

// stage_checkpoints.cpp (Note [Members' checkpoints] in core/member_checkpoint.cpp):
// writes a checkpoint's file on the member's writer thread and tells the coordinator once
// it is written, or why not; takes the coordinator's request for a checkpoint step; and
// calls `then` once no file is being written (now, if none is), so a finishing member's
// last checkpoint is reported before it stops.
void save_checkpoint(stage_pointer self, member_actions::save_checkpoint& c);
void on_checkpoint_written(stage_pointer self, const checkpoint_saved& s);
void on_checkpoint_request(stage_pointer self, std::int64_t step);
void after_checkpoints(stage_pointer self, std::function<void()> then);

// member_wiring.cpp: connects to the shards and neighbours the welcome names, then tells
// the core it is wired.
void connect_peers(stage_pointer self, worker_welcome& w);
// Connects to the actor published at host:port (`peer` names it in errors: "shard 2",
// "stage 1", "worker 3"), retrying with a growing pause until `deadline`; fails the
// member with shard_lost or stage_lost after it.
void connect_peer(stage_pointer self, std::string peer, std::string host, std::uint16_t port,
                  std::chrono::steady_clock::time_point deadline,
                  std::function<void(caf::strong_actor_ptr)> on_connected,
                  std::chrono::milliseconds pause = std::chrono::milliseconds(100));
// ring_wiring.cpp (Note [Ring connections] in core/ring_handshake.hpp): adds the ring
// connections this member waits for to `pending` and makes them, calling one_done for each.
void wire_ring(stage_pointer self, const worker_welcome& w, std::chrono::steady_clock::time_point deadline,
               const std::shared_ptr<std::size_t>& pending, const std::function<void()>& one_done);
void on_ring_hello(stage_pointer self, const stage_hello& h);
// Fails the member if a ring neighbour has not said hello by now.
void on_ring_hello_deadline(stage_pointer self);
// A hello from the previous stage (Note [One connection per neighbour pair]).
void on_stage_hello(stage_pointer self, const stage_hello& h);
void on_hello_deadline(stage_pointer self);
void on_connect_retry(stage_pointer self, const std::string& peer);

}  // namespace troupe::stage_shell
