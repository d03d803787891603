// kv_member_ring: a key-value member's collectives round the ring of a job with no shard
// servers (--mode allreduce with a command): wiring the neighbours, numbering the calls,
// carrying the pieces, and failing every call once the ring is broken.
//
// Note [A ring of users' loops]
// `troupe launch --mode allreduce -- COMMAND` starts no shard servers: the users' loops
// (troupe.horovod, troupe.torch.allreduce_gradients, troupe.kv's allreduce, broadcast and
// allgather, libtroupe) reduce among themselves round a ring, as Horovod's do, with the
// built-in trainer's ring (Note [The ring] in core/ring_collective.hpp): every member ends
// with the same bits, whatever order the pieces arrive in, and a run gives the same bits
// every time. The rules:
//   - the job waits for its --workers members and takes no more; rank r's neighbours are
//     r - 1 and r + 1 (mod the workers). In one process the welcome carries their handles;
//     across processes each member publishes this actor on its node's listen address and
//     joins with it, and the pair is wired as the built-in ring's is (Note [Ring
//     connections] in core/ring_handshake.hpp): the lower rank dials, the other takes the
//     hello of the actor the welcome names, and the join answers once the ring is wired
//     (or fails with stage_lost within --request-timeout). A member's next neighbour may
//     get its welcome later than the member does, so a member that dialled its next waits
//     for its answer (a hello marked hello_ack: "I know you now") before its join answers,
//     and its first pieces never reach a neighbour that would drop them;
//   - every member makes the same calls in the same order (Horovod's and MPI's rule; the
//     store names unnamed calls by their order). Calls are numbered as they come, one runs
//     at a time, and each piece carries the call's number with its name's CRC, so a piece
//     of another call, or of a call another member named differently, stops the ring with
//     a fault that says so instead of mixing two tensors. A neighbour may run ahead (a
//     broadcast's root needs nothing from the others, so broadcast_parameters' root runs
//     through all its calls at once); its pieces of later calls wait here, up to a bound;
//   - the ring has no spare path: a neighbour that dies or leaves, a call not done within
//     its timeout (whose pieces may still come), or a refused piece breaks it, and that
//     call and every later one fail with the reason. The coordinator ends the job when a
//     member dies (Note [Jobs of keys] in core/job_keys.cpp), so no loop waits for pieces
//     that will never come. Keys (init, push, pull) need shard servers and are refused;
//   - between processes of one host a piece's values go through the same ring mailboxes as
//     the built-in ring's (Note [Ring mailboxes], core/ring_link.hpp: kv_ring_mailbox.cpp),
//     and otherwise on the same bulk lanes (Note [Ring lanes], core/ring_lanes.hpp:
//     kv_ring_lane.cpp) once the next worker's is open, or in the message;
//   - a store closes only once the pieces it passed on have left this process (none waits
//     for mailbox room or for the lane's socket), within --request-timeout, so a worker
//     that finishes first does not take its last pieces with it.
#include <spdlog/spdlog.h>

#include "base/crc32c.hpp"
#include "client/kv_member_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::kv::member_shell {

namespace {

// stage_hello's stage field between key-value members: a hello, or the answer to one.
constexpr std::uint32_t hello = 0, hello_ack = 1;

// A call's number and its name's CRC: what every piece of it carries.
std::uint64_t collective_id(const ring_turn& t) {
  return (t.number << 32) | crc32c(t.call.name.data(), t.call.name.size());
}

std::uint64_t number_of(const ring_piece& p) { return p.collective >> 32; }

void finish_turn(member_pointer self);
void start_front(member_pointer self);

}  // namespace

// The ring is broken: the calls taken fail with `f`, and so does every later one.
void break_ring(member_pointer self, fault f) {
  auto& r = self->state.ring;
  if (r.broken) return;
  r.broken = f;
  r.early.clear();
  r.link->drop_waiting();
  for (auto& t : std::exchange(r.turns, {})) t.call.done(f);
}

namespace {

// A piece of the call in progress: applied, and the pieces it lets this member pass on sent.
void apply_piece(member_pointer self, ring_piece p) {
  auto& r = self->state.ring;
  ring_turn& t = r.turns.front();
  if (p.collective != collective_id(t))
    return break_ring(self, {errc::bad_clock, "collective \"" + t.call.name + "\" (this worker's ring call " +
                                                  std::to_string(t.number) + "): " + worker_name(prev_rank(self->state)) +
                                                  " sent a piece of a call named otherwise; every worker must make "
                                                  "the same collective calls in the same order"});
  auto o = t.ring->receive(std::move(p));
  if (o.refused) return break_ring(self, std::move(*o.refused));
  pass_ring_pieces(self, std::move(o.send));
  if (t.ring->done()) finish_turn(self);
}

std::optional<fault> build(ring_turn& t, std::uint32_t world, std::uint32_t rank, std::int64_t piece_elems) {
  const ring_spec spec{world, rank, collective_id(t), piece_elems};
  auto& c = t.call;
  if (c.kind == ring_kind::gather) {
    std::int64_t total = 0;
    for (auto n : c.counts) total += std::max<std::int64_t>(n, 0);
    c.out = tensor(shape{total});
  }
  auto made = c.kind == ring_kind::reduce      ? ring_collective::all_reduce(spec, c.values.view(), c.op)
              : c.kind == ring_kind::broadcast ? ring_collective::broadcast(spec, c.values.view(), c.root)
                                               : ring_collective::all_gather(spec, c.values.view(), c.out.view(), c.counts);
  if (!made) return fault{errc::bad_job, "collective \"" + c.name + "\": " + made.error().message};
  t.ring.emplace(std::move(*made));
  return std::nullopt;
}

// Starts the call at the front, and applies the pieces of it that came early.
void start_front(member_pointer self) {
  auto& st = self->state;
  auto& r = st.ring;
  if (r.broken || r.turns.empty() || r.turns.front().ring) return;
  ring_turn& t = r.turns.front();
  if (auto f = build(t, static_cast<std::uint32_t>(st.place.ring.size()), st.place.rank, st.place.job.ring_piece_elems)) {
    auto done = std::move(t.call.done);
    r.turns.pop_front();
    done(*f);  // this member's own bad call: the ring is untouched
    return start_front(self);
  }
  // Once the ring mailbox to the next worker exists, pieces passed on are computed in it.
  if (r.link->outbox_bytes() > 0)
    t.ring->set_piece_buffers([link = r.link](std::int64_t numel) { return link->piece_buffer(numel); });
  pass_ring_pieces(self, t.ring->start());
  for (ring_piece& p : r.early.take(t.number)) {
    if (r.broken || r.turns.empty() || !r.turns.front().ring) return;
    apply_piece(self, std::move(p));
  }
  if (!r.turns.empty() && r.turns.front().ring && r.turns.front().ring->done()) return finish_turn(self);
  fail_if_stranded(self);  // Note [A ring neighbour that left]
}

// The call at the front is done: its result (the gathered tensor, or the values reduced
// or broadcast in place) to its caller, and the next call starts.
void finish_turn(member_pointer self) {
  auto& r = self->state.ring;
  member_call_ring call = std::move(r.turns.front().call);
  r.turns.pop_front();
  call.done(call.kind == ring_kind::gather ? std::move(call.out) : std::move(call.values));
  start_front(self);
}

// One step of the handshake is done: once it is the last, the ring is wired.
void handshake_step(member_pointer self) {
  auto& r = self->state.ring;
  if (r.handshake && r.handshake->wired() && r.on_wired) std::exchange(r.on_wired, nullptr)();
}

// Takes a hello from a ring neighbour once the welcome said who the neighbours are.
void take_hello(member_pointer self, const stage_actor& sender, const stage_hello& h) {
  auto& r = self->state.ring;
  const auto ptr = caf::actor_cast<caf::strong_actor_ptr>(sender);
  std::optional<ring_handshake::side> took;
  if (r.handshake) took = r.handshake->hello(sent_by(ptr, r.prev_identity), sent_by(ptr, r.next_identity));
  if (!took) {
    const std::string peer = caf::to_string(sender);
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, peer))
      spdlog::warn("troupe.kv: refused a ring hello from {} (claiming worker {}), which is not a ring neighbour this "
                   "worker waits for",
                   peer, h.replica);
    return;
  }
  if (*took == ring_handshake::side::prev) {
    r.prev = sender;
    if (r.handshake->one_neighbour()) r.next = sender;
    self->send(sender, ring_atom::value, stage_hello{self->state.place.rank, hello_ack});
  } else {
    r.next = sender;
  }
  handshake_step(self);
}

// Across processes: dials and awaits the neighbours as Note [Ring connections] says, and
// calls `wired` once both are known.
void wire_by_address(member_pointer self, std::function<void(std::optional<fault>)> wired) {
  auto& st = self->state;
  const auto& place = st.place;
  const auto n = static_cast<std::uint32_t>(place.ring.size()), rank = place.rank;
  auto& hs = st.ring.handshake.emplace(n, rank, true);
  st.ring.on_wired = [self, wired] {
    if (!self->state.lost) wired(std::nullopt);
  };
  const auto deadline = std::chrono::steady_clock::now() + request_timeout(self);
  auto dial = [&](ring_handshake::side side, const std::string& host, std::uint16_t port) {
    const bool next = side == ring_handshake::side::next;
    const std::uint32_t other = next ? (rank + 1) % n : (rank + n - 1) % n;
    connect_peer(self, worker_name(other), "worker", host, port, deadline, std::chrono::milliseconds(50),
                 [self, side, next, wired](or_fault<caf::strong_actor_ptr> p) {
                   auto& r = self->state.ring;
                   if (!r.handshake) return;  // the wiring failed already, and said so
                   if (auto* f = std::get_if<fault>(&p)) {
                     r.handshake.reset();  // failed: nothing more wires the ring, or fails it again
                     return wired(*f);
                   }
                   auto peer = caf::actor_cast<stage_actor>(std::get<caf::strong_actor_ptr>(std::move(p)));
                   (next ? r.next : r.prev) = peer;
                   if (r.handshake->one_neighbour()) r.prev = r.next = peer;
                   r.handshake->dialled(side);
                   self->send(peer, ring_atom::value, stage_hello{self->state.place.rank, hello});
                   handshake_step(self);
                 });
  };
  const bool dial_next = hs.dial_next(), dial_prev = hs.dial_prev();  // a failure drops the handshake
  if (dial_next) dial(ring_handshake::side::next, place.ring_next_host, place.ring_next_port);
  if (dial_prev) dial(ring_handshake::side::prev, place.ring_prev_host, place.ring_prev_port);
  for (auto& [sender, h] : std::exchange(st.ring.early_hellos, {})) take_hello(self, sender, h);
  if (st.ring.handshake && !st.ring.handshake->wired())
    self->delayed_send(self, request_timeout(self), member_call_retry{[self, wired, rank, n] {
                         auto& r = self->state.ring;
                         const auto silent = r.handshake ? r.handshake->silent() : std::nullopt;
                         if (!silent) return;
                         r.handshake.reset();  // failed: nothing more wires the ring, or fails it again
                         r.on_wired = nullptr;
                         const bool prev = *silent == ring_handshake::side::prev;
                         const std::uint32_t other = prev ? (rank + n - 1) % n : (rank + 1) % n;
                         wired(fault{errc::stage_lost, worker_name(rank) + " never heard from its ring neighbour " +
                                                           worker_name(other) +
                                                           " within --request-timeout; is that process running?"});
                       }});
}

}  // namespace

void wire_kv_ring(member_pointer self, const worker_welcome& w, std::function<void(std::optional<fault>)> done) {
  auto& st = self->state;
  auto& r = st.ring;
  r.on = rings_kv_members(st.place.job) && st.place.ring.size() >= 2;
  if (!r.on) return done(std::nullopt);
  r.prev_identity = w.ring_prev_identity;
  r.next_identity = w.ring_next_identity;
  auto wired = [self, done](std::optional<fault> f) {
    if (!f) {
      auto& ring = self->state.ring;
      self->monitor(ring.prev);
      if (ring.next != ring.prev) self->monitor(ring.next);
    }
    done(std::move(f));
  };
  if (w.ring_next) {  // one process: the handles
    r.prev = w.ring_prev;
    r.next = w.ring_next;
    return wired(std::nullopt);
  }
  if (!st.opts.connector)
    return done(fault{errc::bad_job, "the job's ring neighbours are on other nodes but this store has no network"});
  wire_by_address(self, std::move(wired));
}

void on_ring_hello(member_pointer self, const stage_hello& h) {
  auto& r = self->state.ring;
  auto sender = caf::actor_cast<stage_actor>(self->current_sender());
  if (h.stage == hello_ack) {  // the dialled next neighbour takes this member's pieces now
    if (r.handshake && sender && r.next && sender.address() == r.next.address() && r.handshake->acked())
      return handshake_step(self);
    spdlog::warn("troupe.kv: ignored a ring answer from {}, which this worker did not dial", caf::to_string(sender));
    return;
  }
  if (!r.on && r.early_hellos.size() < 2) {  // before the welcome; past two, take_hello refuses it
    r.early_hellos.emplace_back(std::move(sender), h);
    return;
  }
  take_hello(self, sender, h);
}

void on_ring_piece(member_pointer self, ring_piece& p) {
  auto& st = self->state;
  auto& r = st.ring;
  const auto& sender = self->current_sender();
  if (!r.on || !r.prev || !sender || sender->address() != r.prev.address()) {
    spdlog::warn("troupe.kv: dropped a ring piece from {}, which is not this worker's previous ring neighbour",
                 caf::to_string(sender));
    return;
  }
  if (r.broken) return;
  // A worker's pieces come through its mailbox or else in the messages and on its lane
  // (Note [Ring lanes]), never both, so mailbox pieces need no place in the lane's order.
  if (p.shared.empty()) return take_ring_piece_in_order(self, std::move(p));
  if (auto f = fill_ring_piece(self, p)) return break_ring(self, std::move(*f));
  take_ring_piece(self, std::move(p), true);
}

void take_ring_piece(member_pointer self, ring_piece p, bool in_mailbox) {
  auto& st = self->state;
  auto& r = st.ring;
  if (r.broken) return;
  const bool running = !r.turns.empty() && r.turns.front().ring;
  const std::uint64_t current = running ? r.turns.front().number : r.calls;
  if (running && number_of(p) == current) return apply_piece(self, std::move(p));
  // Pieces of later calls, of up to 2^30 floats in all: about two per piece, and one per chunk more.
  const std::size_t most = 2 * (static_cast<std::size_t>((std::int64_t{1} << 30) / st.place.job.ring_piece_elems) +
                                st.place.ring.size() + 1);
  // Out of the mailbox: a piece held there would keep the next ones' space from its sender.
  if (in_mailbox) p.values = tensor(p.values);
  const std::uint64_t number = number_of(p);
  const auto v = r.early.hold(std::move(p), number, running ? current + 1 : current, ring_early::any, most);
  if (v == ring_early::verdict::held) return;
  break_ring(self, {errc::bad_clock, worker_name(prev_rank(st)) + " sent a piece of ring call " +
                                         std::to_string(number) + " while this worker is at call " +
                                         std::to_string(current) +
                                         (v == ring_early::verdict::too_many
                                              ? ", past the " + std::to_string(most) + " pieces of later calls held"
                                              : std::string()) +
                                         "; every worker must make the same collective calls in the same order"});
}

void take_ring_call(member_pointer self, member_call_ring& c) {
  auto& st = self->state;
  auto& r = st.ring;
  if (st.lost) return c.done(*st.lost);
  if (r.broken) return c.done(*r.broken);
  ring_turn t{std::move(c), r.calls++, std::nullopt};
  if (t.call.timeout.count() > 0) self->delayed_send(self, t.call.timeout, member_ring_overdue{t.number});
  r.turns.push_back(std::move(t));
  start_front(self);  // a ring of one is done as it starts
}

void on_ring_overdue(member_pointer self, const member_ring_overdue& o) {
  auto& r = self->state.ring;
  for (const auto& t : r.turns)
    if (t.number == o.call)
      return break_ring(self, {errc::timed_out, "collective \"" + t.call.name + "\" was not done within " +
                                                    std::to_string(t.call.timeout.count()) +
                                                    " ms; is every worker making the same collective calls in the "
                                                    "same order? The ring cannot go on after a call that did not "
                                                    "finish, so later collectives fail too"});
}

}  // namespace troupe::kv::member_shell
