// stage_ring_mailbox: a member's ends of the ring mailboxes in --mode allreduce (Note
// [Ring mailboxes] in transport/ring_mailbox.hpp): the outbox to its next replica, made and
// offered with its first piece when that replica lives in another process and the
// same-host fast path is on, and the inbox of its previous replica's outbox, mapped when
// offered. Pieces that cannot go through a mailbox go on a ring lane (Note [Ring lanes] in
// actors/stage_ring_lane.cpp) or in the messages.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "actors/stage_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::stage_shell {

namespace {

// The most shared memory one outbox takes. Pieces that find no room wait for it, and are
// copied twice (computed aside, then copied in); 64 MiB holds the first burst of a step
// (a replica's own chunk) for gradients up to 128 MB between two replicas. Measured with
// 2 replicas and a 105 MB gradient: 8 MiB 80 ms a step, 64 MiB 55 ms, 256 MiB 56-59 ms.
constexpr std::size_t max_outbox_bytes = std::size_t{64} << 20;
// How soon a member looks again for room for the pieces that wait.
constexpr std::chrono::microseconds drain_pause{100};

// Room for the pieces of two collectives (a replica runs at most one collective ahead of
// its next replica) and for the skip of one piece at the mailbox's end, up to the most;
// at least room for two pieces.
std::size_t outbox_bytes(const member_core& c) {
  const std::int64_t n = static_cast<std::int64_t>(c.place().ring.size()), pe = c.place().job.ring_piece_elems;
  const std::int64_t chunk = c.ring_numel() / n + 1, piece = std::min(pe, chunk);
  const std::int64_t pieces_per_chunk = (chunk + pe - 1) / pe;
  const std::size_t one_piece = shm::ring_outbox::bytes_for(piece);
  const std::size_t one = static_cast<std::size_t>(2 * (n - 1) * pieces_per_chunk) * one_piece;
  return std::max(2 * one_piece, std::min(max_outbox_bytes, 2 * one + one_piece));
}

// Moves the piece's values into the outbox when there is room: sealed where the core
// computed them, or copied in. False: no room (or the outbox is closed).
bool into_outbox(shm::ring_outbox& out, ring_piece& p) {
  if (p.values.empty()) return true;
  const bool lent = out.holds(p.values.bytes());
  auto where = lent ? out.seal(p.values) : out.put(p.values);
  if (!where) return false;
  p.shared = std::move(*where);
  p.values = tensor{};
  return true;
}

std::string next_name(stage_pointer self) {
  return "replica " + std::to_string(self->state.core->next_replica());
}

std::string prev_name(stage_pointer self) { return "replica " + std::to_string(self->state.core->previous_replica()); }

// With the first piece: an outbox for a next replica in another process, offered to it;
// without one, a bulk lane is asked for (Note [Ring lanes] in actors/stage_ring_lane.cpp).
void offer_outbox(stage_pointer self) {
  auto& st = self->state;
  st.mailboxes.offered = true;
  if (!st.ring_next || st.ring_next.node() == self->node()) return;
  if (st.opts.fast_path_tag.empty()) return ask_ring_lane(self);
  auto out = shm::ring_outbox::create(st.opts.fast_path_tag, outbox_bytes(*st.core), st.core->replica());
  if (!out) {
    spdlog::warn("{}: no ring mailbox to {} ({}); its ring pieces go over the network", who(self), next_name(self),
                 out.error().message);
    return ask_ring_lane(self);
  }
  st.mailboxes.link->out.emplace(std::move(*out));
  self->send(st.ring_next, ring_atom::value, ring_mailbox_offer{false, st.mailboxes.link->out->name(), false, {}});
}

void take_offer(stage_pointer self, const ring_mailbox_offer& m) {
  auto& st = self->state;
  ring_mailbox_offer answer{true, m.segment, false, {}};
  if (st.opts.fast_path_tag.empty()) {
    answer.why = "the same-host fast path is off here";
  } else if (st.mailboxes.in) {
    answer.why = "it maps a mailbox of " + prev_name(self) + " already";
  } else if (auto in = shm::ring_inbox::open(m.segment, st.opts.fast_path_tag, st.core->previous_replica())) {
    st.mailboxes.in.emplace(std::move(*in));
    answer.accepted = true;
  } else {
    answer.why = in.error().message;
  }
  if (answer.accepted)
    spdlog::info("{}: takes its ring pieces from {} through shared memory", who(self), prev_name(self));
  else
    spdlog::info("{}: declined the ring mailbox of {} ({}); its pieces come over the network", who(self),
                 prev_name(self), answer.why);
  self->send(st.ring_prev, ring_atom::value, std::move(answer));
}

void take_answer(stage_pointer self, const ring_mailbox_offer& m) {
  auto& out = self->state.mailboxes.link->out;
  if (!out || m.segment != out->name() || out->usable() || out->closed()) {
    spdlog::warn("{}: ignored an answer about ring mailbox {}, which it has not offered", who(self), m.segment);
    return;
  }
  if (!m.accepted) {
    spdlog::info("{}: its ring pieces to {} go over the network ({})", who(self), next_name(self), m.why);
    out.reset();
    return ask_ring_lane(self);
  }
  out->accepted();
  spdlog::info("{}: passes its ring pieces to {} through shared memory ({} MB mailbox)", who(self), next_name(self),
               out->capacity() >> 20);
}

// Sends a piece to ring_next: on the ring lane when it is open and the values are not in
// the outbox, else in the message.
void send_piece(stage_pointer self, ring_piece& p) {
  onto_ring_lane(self, p);
  self->send(self->state.ring_next, ring_atom::value, std::move(p));
}

}  // namespace

void pass_ring_piece(stage_pointer self, ring_piece p) {
  auto& st = self->state;
  auto& mb = st.mailboxes;
  auto& link = *mb.link;
  if (mb.next_gone) return;  // Note [A next replica gone in the last step]
  if (!mb.offered) offer_outbox(self);
  if (!link.out || !link.out->usable()) {
    if (link.out && !p.values.empty() && link.out->holds(p.values.bytes())) {
      link.out->abandon(p.values.bytes());
      p.values = tensor(p.values);  // a copy: the outbox may be gone before the message is serialized
    }
    if (link.waiting.empty()) return send_piece(self, p);
  } else if (link.waiting.empty() && into_outbox(*link.out, p)) {
    return send_piece(self, p);
  } else if (!p.values.empty() && link.out->holds(p.values.bytes())) {
    // Pieces before it wait: it may not overtake them, so it waits too, out of the outbox.
    link.out->abandon(p.values.bytes());
    p.values = tensor(p.values);
  }
  link.waiting.push_back(std::move(p));
  drain_ring_pieces(self);
}

void drain_ring_pieces(stage_pointer self) {
  auto& st = self->state;
  auto& mb = st.mailboxes;
  auto& link = *mb.link;
  while (!link.waiting.empty()) {
    ring_piece& p = link.waiting.front();
    // A closed outbox takes nothing more: what waits goes in the messages.
    if (link.out && link.out->usable() && !into_outbox(*link.out, p)) break;
    send_piece(self, p);
    link.waiting.pop_front();
  }
  if (link.waiting.empty()) {
    if (!mb.once_drained) return;
    if (ring_lane_flushed(self)) return std::exchange(mb.once_drained, nullptr)();
  }
  if (mb.drain_due) return;
  mb.drain_due = true;
  self->delayed_send(self, drain_pause, ring_drain{});
}

void after_ring_pieces(stage_pointer self, std::function<void()> then) {
  auto& mb = self->state.mailboxes;
  auto& link = *mb.link;
  if (mb.next_gone || (link.waiting.empty() && ring_lane_flushed(self))) return then();
  mb.once_drained = std::move(then);
  drain_ring_pieces(self);
}

void on_ring_mailbox(stage_pointer self, const caf::actor_addr& sender, const ring_mailbox_offer& m) {
  auto& st = self->state;
  if (!st.training) {  // the ring's hellos may not all be in yet: looked at once training
    if (!m.answer && !st.mailboxes.early_offer) st.mailboxes.early_offer.emplace(sender, m);
    return;
  }
  const bool from_prev = st.ring_prev && sender == st.ring_prev.address();
  const bool from_next = st.ring_next && sender == st.ring_next.address();
  if (m.answer ? !from_next : !from_prev) {
    const std::string peer = caf::to_string(sender);
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, peer))
      spdlog::warn("{}: refused a ring mailbox {} from {}, which is not its {} in the ring", who(self),
                   m.answer ? "answer" : "offer", peer, m.answer ? "next replica" : "previous replica");
    return;
  }
  if (m.answer)
    take_answer(self, m);
  else
    take_offer(self, m);
}

bool fill_ring_piece(stage_pointer self, ring_piece& p) {
  if (p.shared.empty()) return true;
  auto& in = self->state.mailboxes.in;
  std::string problem;
  if (!p.values.empty())
    problem = "carries its values both in the message and in a mailbox";
  else if (!in)
    problem = "lies in a mailbox this member never mapped";
  else if (auto t = in->take(p.shared)) {
    p.values = std::move(*t);
    p.shared = {};
    return true;
  } else {
    problem = t.error().message;
  }
  fail(self, {errc::malformed, who(self) + ": a ring piece from " + prev_name(self) + " " + problem +
                                   "; run one troupe build on every node"});
  return false;
}

}  // namespace troupe::stage_shell
