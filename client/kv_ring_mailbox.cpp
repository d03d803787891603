// kv_ring_mailbox: a key-value member's ends of the ring mailboxes in a ring of users'
// loops (Note [A ring of users' loops] in client/kv_member_ring.cpp), through the ring link
// every kind of ring member uses (core/ring_link.hpp): the outbox to the next worker, made
// and offered with this member's first piece when that worker lives in another process of
// this host and the fast path is on (else the bulk lane to it is asked for: kv_ring_lane.cpp);
// the inbox of the previous worker's outbox, mapped when it offers one; pieces passed on
// through the outbox (or on the lane, or in the message), or waiting for room and drained
// after a pause; and a piece from the inbox filled before the collective sees it.
#include <spdlog/spdlog.h>

#include <chrono>
#include <utility>

#include "client/kv_member_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::kv::member_shell {

namespace {

// How soon a member looks again for room for the pieces that wait.
constexpr std::chrono::microseconds drain_pause{100};

ring_link::sender to_next(member_pointer self) {
  return [self](ring_piece& p) {
    onto_ring_lane(self, p);
    self->send(self->state.ring.next, ring_atom::value, std::move(p));
  };
}

// With the first piece: an outbox for a next worker in another process of this host;
// without the fast path, or once it is declined (the next worker is on another host), a
// bulk lane (Note [Ring lanes]).
void offer_outbox(member_pointer self) {
  auto& st = self->state;
  auto& r = st.ring;
  r.offered = true;
  if (!r.next || r.next.node() == self->node()) return;
  if (st.opts.fast_path_tag.empty()) return ask_ring_lane(self);
  auto segment = r.link->make_outbox(st.opts.fast_path_tag, ring_link::max_outbox_bytes, st.place.rank);
  if (!segment) {
    spdlog::warn("troupe.kv: no ring mailbox to {} ({}); the ring's pieces go another way", worker_name(next_rank(st)),
                 segment.error().message);
    return ask_ring_lane(self);
  }
  self->send(r.next, ring_atom::value, ring_mailbox_offer{false, *segment, false, {}});
}

void drain(member_pointer self) {
  auto& r = self->state.ring;
  if (r.broken || !r.link->drain(to_next(self)) || r.drain_due) return;
  r.drain_due = true;
  self->delayed_send(self, drain_pause, member_call_retry{[self] {
                       self->state.ring.drain_due = false;
                       drain(self);
                     }});
}

}  // namespace

void pass_ring_pieces(member_pointer self, std::vector<ring_piece> pieces) {
  auto& r = self->state.ring;
  if (r.next_left) return;  // Note [A ring neighbour that left]: it needs none
  if (!r.offered && !pieces.empty()) offer_outbox(self);
  bool waits = false;
  for (ring_piece& p : pieces) waits = r.link->pass(std::move(p), to_next(self)) || waits;
  if (waits) drain(self);
}

void on_ring_mailbox(member_pointer self, const ring_mailbox_offer& m) {
  auto& st = self->state;
  auto& r = st.ring;
  const auto& sender = self->current_sender();
  const auto& from = m.answer ? r.next : r.prev;
  if (!r.on || !from || !sender || sender->address() != from.address()) {
    const std::string peer = caf::to_string(sender);
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, peer))
      spdlog::warn("troupe.kv: refused a ring mailbox {} from {}, which is not this worker's {} ring neighbour",
                   m.answer ? "answer" : "offer", peer, m.answer ? "next" : "previous");
    return;
  }
  if (m.answer) {
    switch (r.link->take_answer(m.segment, m.accepted)) {
      case ring_link::answer::ignored:
        spdlog::warn("troupe.kv: ignored an answer about ring mailbox {}, which this worker has not offered",
                     m.segment);
        return;
      case ring_link::answer::refused:
        spdlog::info("troupe.kv: the ring's pieces to {} go another way ({})", worker_name(next_rank(st)), m.why);
        return ask_ring_lane(self);
      case ring_link::answer::accepted:
        spdlog::info("troupe.kv: passes the ring's pieces to {} through shared memory ({} MB mailbox)", worker_name(next_rank(st)),
                     r.link->outbox_bytes() >> 20);
        return;
    }
  }
  ring_mailbox_offer answer{true, m.segment, false, {}};
  if (const auto why = r.link->take_offer(m.segment, st.opts.fast_path_tag, prev_rank(st))) {
    answer.why = *why;
    spdlog::info("troupe.kv: declined the ring mailbox of {} ({}); its pieces come in the messages", worker_name(prev_rank(st)),
                 answer.why);
  } else {
    answer.accepted = true;
    spdlog::info("troupe.kv: takes the ring's pieces from {} through shared memory", worker_name(prev_rank(st)));
  }
  self->send(r.prev, ring_atom::value, std::move(answer));
}

std::optional<fault> fill_ring_piece(member_pointer self, ring_piece& p) {
  const auto problem = self->state.ring.link->fill(p);
  if (!problem) return std::nullopt;
  return fault{errc::malformed,
               "a ring piece from " + worker_name(prev_rank(self->state)) + " " + *problem + "; run one troupe build on every node"};
}

}  // namespace troupe::kv::member_shell
