// kv_member_state: what the key-value member's actor keeps (its place, the shards' handles,
// the calls in flight and those held for a shard away) and the functions its two files
// share: requests with deadlines that fail at once when the job is lost, and a shard lost
// and back (kv_member_away.cpp, Note [A shard away]). Private to kv_member.cpp and
// kv_member_away.cpp.
#pragma once

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/member_bells.hpp"
#include "actors/member_lanes.hpp"
#include "client/kv_member.hpp"
#include "core/ring_collective.hpp"
#include "core/ring_early.hpp"
#include "core/ring_handshake.hpp"
#include "core/ring_lanes.hpp"
#include "core/ring_link.hpp"

namespace troupe::kv::member_shell {

// A request waiting for its answer: how it fails, and the shard it went to (none: the
// coordinator).
struct in_flight {
  std::function<void(const fault&)> fail;
  std::optional<std::uint32_t> shard;
};

// A call held while its shard is away: what sends it once the shard is back, and how it
// fails if the job ends first.
struct held_call {
  std::function<void()> send;
  std::function<void(const fault&)> fail;
};

// Note [A ring of users' loops] (kv_member_ring.cpp): the neighbours, and the calls.
struct ring_turn {  // a call numbered `number` (in arrival order, alike on every member)
  member_call_ring call;
  std::uint64_t number = 0;
  std::optional<ring_collective> ring;  // once started
};
struct ring_state {
  bool on = false;  // this member is in a ring (set at the welcome)
  stage_actor prev, next;
  member_identity prev_identity, next_identity;  // across nodes: whose hellos wire prev and next
  // Across nodes: whom to dial and whose hellos (and ack) to await (Note [Ring
  // connections] in core/ring_handshake.hpp; none once the wiring failed), and what to do
  // once wired (once).
  std::optional<ring_handshake> handshake;
  std::function<void()> on_wired;
  std::vector<std::pair<stage_actor, stage_hello>> early_hellos;  // came before the welcome
  std::uint64_t calls = 0;        // calls taken so far; the next one's number
  std::deque<ring_turn> turns;    // the call in progress (front, started) and those waiting
  ring_early early;  // pieces of later calls (core/ring_early.hpp)
  std::optional<fault> broken;    // once set, every ring call fails with it
  // Note [A ring neighbour that left]: what a call that needs more of the previous
  // neighbour fails with, once it left; whether the next one left (its pieces are dropped).
  std::optional<fault> prev_left;
  bool next_left = false;
  // Between processes of one host (Note [Ring mailboxes] in transport/ring_mailbox.hpp):
  // the link with the outbox to `next` and the inbox from `prev` (core/ring_link.hpp);
  // whether the outbox was offered (with the first piece), and a drain is on its way.
  std::shared_ptr<ring_link> link = std::make_shared<ring_link>();
  bool offered = false, drain_due = false;
  // Between hosts, or with shared memory off (Note [Ring lanes] in core/ring_lanes.cpp):
  // the lane to `next` and the one from `prev`, and the pieces waiting for payloads.
  ring_lanes lanes;
};

struct member_state {
  member_options opts;
  member_assignment place;
  std::vector<shard_actor> shards;
  std::optional<fault> lost;  // once set, every call fails with it
  std::uint64_t next = 1;
  std::map<std::uint64_t, in_flight> pending;
  std::optional<lane::lanes_to_shards> lanes;  // made at the join when opts.lanes
  // Note [A shard away]: shards lost and not yet replaced, and the calls held for them.
  std::vector<bool> away;
  std::map<std::uint32_t, std::vector<held_call>> held;
  ring_state ring;
  // Its doorbells (Note [Doorbells]), made at its first call through one; declared after
  // opts, whose links hold the channels' memory it watches.
  std::unique_ptr<member_bells> bells;
  static inline const char* name = "troupe.kv_member";
};

using member_pointer = caf::stateful_actor<member_state>*;

inline std::chrono::milliseconds request_timeout(member_pointer self) {
  return std::chrono::milliseconds(self->state.place.job.request_timeout_ms);
}

fault to_fault(const caf::error& e, std::chrono::milliseconds timeout);

// Fails every call in flight, every held one and every later one with `f`.
void lose(member_pointer self, fault f);

// Call `id` to `shard` (none: to no shard), answered once to `done`: the answer and the
// error that answered_once returns reach it only while the call is still in `pending`, and
// the job's loss (or its shard's) takes it out of there first. track() puts it there once
// it is sent.
template <class Reply, class Done>
auto answered_once(member_pointer self, std::uint64_t id, std::chrono::milliseconds timeout, Done done) {
  return std::pair{[self, id, done](Reply& r) {
                     if (self->state.pending.erase(id)) done(std::move(r));
                   },
                   [self, id, done, timeout](caf::error& e) {
                     if (self->state.pending.erase(id)) done(to_fault(e, timeout));
                   }};
}
template <class Done>
void track(member_pointer self, std::uint64_t id, std::optional<std::uint32_t> shard, Done done) {
  self->state.pending.emplace(id, in_flight{[done](const fault& f) { done(f); }, shard});
}

// Sends a request and calls done exactly once: with the answer, the error, or the loss
// of the job (whichever comes first). `shard`: the shard it goes to, whose loss fails it.
template <class Reply, class Dest, class Done, class... Ts>
void ask_to(member_pointer self, std::optional<std::uint32_t> shard, const Dest& dest,
            std::chrono::milliseconds timeout, Done done, Ts&&... xs) {
  auto& st = self->state;
  if (st.lost) return done(*st.lost);
  const auto id = st.next++;
  track(self, id, shard, done);
  auto [ok, failed] = answered_once<Reply>(self, id, timeout, std::move(done));
  self->request(dest, timeout, std::forward<Ts>(xs)...).then(std::move(ok), std::move(failed));
}

template <class Reply, class Dest, class Done, class... Ts>
void ask(member_pointer self, const Dest& dest, std::chrono::milliseconds timeout, Done done, Ts&&... xs) {
  ask_to<Reply>(self, std::nullopt, dest, timeout, std::move(done), std::forward<Ts>(xs)...);
}

// kv_member_bells.cpp (Note [Doorbells]): a push or a pull posted through the bell block
// of its channel, as the store's call in flight; false: send it as a message. The
// waiter's nudge and the deadline. Closing shard s's doorbells (none: every block, before
// the member's channels may go), failing the calls in flight through them.
bool ring_push(member_pointer self, const member_call_push& c);
bool ring_pull(member_pointer self, const member_call_pull& c);
void on_bells_answered(member_pointer self);
void on_bell_deadline(member_pointer self);
void close_bells(member_pointer self, std::optional<std::uint32_t> shard, const std::string& why);

// kv_member_away.cpp (Note [A shard away]).
// Whether the job replaces a lost shard while its members go on.
bool replaces_shards(member_pointer self);
// Keeps call c, unsent, for send(self, c) once its shard is back, when that shard is away
// and the job not lost; whether it did.
template <class Call>
bool held_while_away(member_pointer self, Call& c, void (*send)(member_pointer, Call&)) {
  auto& st = self->state;
  if (st.lost || c.shard >= st.away.size() || !st.away[c.shard]) return false;
  auto call = std::make_shared<Call>(std::move(c));
  st.held[call->shard].push_back({[self, call, send] { send(self, *call); }, [call](const fault& f) { call->done(f); }});
  return true;
}
// The done of a push that a lost shard takes with it: answered with no versions.
std::function<void(or_fault<kv_push_ack>)> lost_with_the_shard(member_pointer self, std::uint32_t s,
                                                               std::function<void(or_fault<kv_push_ack>)> done);
// The done of a pull that is asked again, of the shard's replacement, when its shard is lost.
std::function<void(or_fault<kv_pull_reply>)> asked_again(member_pointer self, const member_call_pull& c);
// Shard s went away: held (replaced) or the job is lost.
void shard_down(member_pointer self, std::uint32_t s, const caf::error& reason);
// The coordinator says shard b.shard is back.
void shard_back(member_pointer self, const kv_shard_back& b);
// The pull (kv_member.cpp), which asked_again sends once more.
void pull(member_pointer self, member_call_pull& c);
// kv_member_ring.cpp (Note [A ring of users' loops]).
// "worker R", and the ranks of this member's ring neighbours.
inline std::string worker_name(std::uint32_t r) { return "worker " + std::to_string(r); }
inline std::uint32_t ring_size(const member_state& st) {
  return static_cast<std::uint32_t>(std::max<std::size_t>(1, st.place.ring.size()));
}
inline std::uint32_t prev_rank(const member_state& st) { return (st.place.rank + ring_size(st) - 1) % ring_size(st); }
inline std::uint32_t next_rank(const member_state& st) { return (st.place.rank + 1) % ring_size(st); }
// After the welcome: reaches the ring neighbours it names, then calls `done` (with why
// not); at once when the job does not ring.
void wire_kv_ring(member_pointer self, const worker_welcome& w, std::function<void(std::optional<fault>)> done);
void on_ring_hello(member_pointer self, const stage_hello& h);
// A piece from the previous worker (its sender checked): filled from the mailbox, or put in
// the lane's order; take_ring_piece then applies it to the call in progress, or keeps it
// for a later call (copied out of the mailbox, `in_mailbox`).
void on_ring_piece(member_pointer self, ring_piece& p);
void take_ring_piece(member_pointer self, ring_piece p, bool in_mailbox);
void take_ring_call(member_pointer self, member_call_ring& c);
void on_ring_overdue(member_pointer self, const member_ring_overdue& o);
// kv_ring_leaving.cpp (Note [A ring neighbour that left]): whether `source` was a ring
// neighbour; one gone breaks the ring, one that left the calls it cannot finish. A
// neighbour's goodbye, and this member's to its neighbours before it leaves (`then` once
// they answered, or a second passed). Fails the call in progress if it needs more of a
// previous neighbour that left.
bool ring_neighbour_down(member_pointer self, const caf::down_msg& dm);
caf::ok_atom on_ring_goodbye(member_pointer self);
void say_goodbye_to_ring(member_pointer self, std::function<void()> then);
void fail_if_stranded(member_pointer self);
// The ring is broken (or the job lost): the calls taken fail with `f`, and so does every
// later one.
void break_ring(member_pointer self, fault f);
// kv_ring_mailbox.cpp (Note [Ring mailboxes]): passes pieces on to the next worker,
// through the ring mailbox when it can (offering it with the first); takes an offer or its
// answer; and fills a piece that names the inbox (the fault that breaks the ring, if not).
void pass_ring_pieces(member_pointer self, std::vector<ring_piece> pieces);
void on_ring_mailbox(member_pointer self, const ring_mailbox_offer& m);
std::optional<fault> fill_ring_piece(member_pointer self, ring_piece& p);
// kv_ring_lane.cpp (Note [Ring lanes] in core/ring_lanes.cpp): asks the next worker for a
// lane (when it is on another node and no mailbox carries the pieces); moves a piece onto
// it when it is open; whether every piece passed on has left this process (a store closes
// only then); answers the previous worker's ask with an offer; takes a piece in the order
// its message came, once its payload is here; and the ring lanes' payloads and events.
void ask_ring_lane(member_pointer self);
void onto_ring_lane(member_pointer self, ring_piece& p);
bool ring_flushed(member_pointer self);
caf::result<lane_offer> on_ring_lane_ask(member_pointer self);
void take_ring_piece_in_order(member_pointer self, ring_piece p);
void on_ring_lane_payload(member_pointer self, lane_payload& p);
void on_ring_lane_event(member_pointer self, const lane_event& e);

// Connects to the actor published at host:port (`peer` names it, with the certificate role
// it must present), retrying with a growing pause until `deadline`.
void connect_peer(member_pointer self, std::string peer, const char* role, std::string host, std::uint16_t port,
                  std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds pause,
                  std::function<void(or_fault<caf::strong_actor_ptr>)> then);
// Connects to the shard at host:port, retrying with a growing pause until `deadline`.
void connect_shard(member_pointer self, std::uint32_t i, std::string host, std::uint16_t port,
                   std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds pause,
                   std::function<void(or_fault<shard_actor>)> then);

}  // namespace troupe::kv::member_shell
