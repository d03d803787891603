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
  return std::max(2 * one_piece, std::min(ring_link::max_outbox_bytes, 2 * one + one_piece));
}

std::string next_name(stage_pointer self) { return "replica " + std::to_string(self->state.core->next_replica()); }

std::string prev_name(stage_pointer self) { return "replica " + std::to_string(self->state.core->previous_replica()); }

// With the first piece: an outbox for a next replica in another process, offered to it;
// without one, a bulk lane is asked for (Note [Ring lanes] in core/ring_lanes.cpp).
void offer_outbox(stage_pointer self) {
  auto& st = self->state;
  st.mailboxes.offered = true;
  if (!st.ring_next || st.ring_next.node() == self->node()) return;
  if (st.opts.fast_path_tag.empty()) return ask_ring_lane(self);
  auto segment = st.mailboxes.link->make_outbox(st.opts.fast_path_tag, outbox_bytes(*st.core), st.core->replica());
  if (!segment) {
    spdlog::warn("{}: no ring mailbox to {} ({}); its ring pieces go over the network", who(self), next_name(self),
                 segment.error().message);
    return ask_ring_lane(self);
  }
  self->send(st.ring_next, ring_atom::value, ring_mailbox_offer{false, *segment, false, {}});
}

void take_offer(stage_pointer self, const ring_mailbox_offer& m) {
  auto& st = self->state;
  ring_mailbox_offer answer{true, m.segment, false, {}};
  const auto why = st.mailboxes.link->take_offer(m.segment, st.opts.fast_path_tag, st.core->previous_replica());
  answer.accepted = !why;
  if (answer.accepted) {
    spdlog::info("{}: takes its ring pieces from {} through shared memory", who(self), prev_name(self));
  } else {
    answer.why = *why;
    spdlog::info("{}: declined the ring mailbox of {} ({}); its pieces come over the network", who(self),
                 prev_name(self), answer.why);
  }
  self->send(st.ring_prev, ring_atom::value, std::move(answer));
}

void take_answer(stage_pointer self, const ring_mailbox_offer& m) {
  auto& link = *self->state.mailboxes.link;
  switch (link.take_answer(m.segment, m.accepted)) {
    case ring_link::answer::ignored:
      spdlog::warn("{}: ignored an answer about ring mailbox {}, which it has not offered", who(self), m.segment);
      return;
    case ring_link::answer::refused:
      spdlog::info("{}: its ring pieces to {} go over the network ({})", who(self), next_name(self), m.why);
      return ask_ring_lane(self);
    case ring_link::answer::accepted:
      spdlog::info("{}: passes its ring pieces to {} through shared memory ({} MB mailbox)", who(self), next_name(self),
                   link.outbox_bytes() >> 20);
      return;
  }
}

// Sends a piece to ring_next: on the ring lane when it is open and the values are not in
// the outbox, else in the message.
void send_piece(stage_pointer self, ring_piece& p) {
  onto_ring_lane(self, p);
  self->send(self->state.ring_next, ring_atom::value, std::move(p));
}

}  // namespace

void pass_ring_piece(stage_pointer self, ring_piece p) {
  auto& mb = self->state.mailboxes;
  if (mb.next_gone) return;  // Note [A next replica gone in the last step]
  if (!mb.offered) offer_outbox(self);
  if (mb.link->pass(std::move(p), [self](ring_piece& q) { send_piece(self, q); })) drain_ring_pieces(self);
}

void drain_ring_pieces(stage_pointer self) {
  auto& mb = self->state.mailboxes;
  if (!mb.link->drain([self](ring_piece& q) { send_piece(self, q); })) {
    if (!mb.once_drained) return;
    if (ring_lane_flushed(self)) return std::exchange(mb.once_drained, nullptr)();
  }
  if (mb.drain_due) return;
  mb.drain_due = true;
  self->delayed_send(self, drain_pause, ring_drain{});
}

void after_ring_pieces(stage_pointer self, std::function<void()> then) {
  auto& mb = self->state.mailboxes;
  if (mb.next_gone || (!mb.link->waiting() && ring_lane_flushed(self))) return then();
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
  const auto problem = self->state.mailboxes.link->fill(p);
  if (!problem) return true;
  fail(self, {errc::malformed, who(self) + ": a ring piece from " + prev_name(self) + " " + *problem +
                                   "; run one troupe build on every node"});
  return false;
}

}  // namespace troupe::stage_shell
