// kv_ring_leaving: a key-value member's ring neighbours leaving or lost (Note [A ring
// neighbour that left]), and its own goodbye to them before it leaves.
#include "client/kv_member_state.hpp"

namespace troupe::kv::member_shell {

namespace {

const char* const cannot = "; the ring's collectives pass through every worker, so they cannot finish without it";

// The neighbour on side prev and/or next left normally.
void neighbour_left(member_pointer self, bool prev, bool next) {
  auto& st = self->state;
  auto& r = st.ring;
  if (next && !r.next_left) {
    r.next_left = true;
    r.link->drop_waiting();
  }
  if (prev && !r.prev_left)
    r.prev_left = fault{errc::stage_lost, worker_name(prev_rank(st)) + " left the job" + std::string(cannot)};
  fail_if_stranded(self);
}

}  // namespace

// Note [A ring neighbour that left]
// A worker leaves (closes its store) only after every call it made is done and every
// piece it passed on has left its process, so a neighbour that left normally finished
// the same calls: the next one needs nothing more (pieces for it are dropped), and
// everything the previous one sent is here, its messages ahead of its goodbye (a piece on
// a ring lane once its payload comes). This worker's calls go on while what it holds
// finishes them: a root that broadcasts and leaves at once leaves its neighbour the
// pieces of calls the neighbour has not begun. A call that would need more of the
// previous neighbour fails with stage_lost, as does everything after it. A neighbour
// gone any other way (its down before its goodbye, with any reason but normal) breaks the
// ring at once.
// The goodbye: a leaving member tells its neighbours so, and leaves once each has
// answered (or a second has passed). Its down alone did not do: two connections join
// neighbours in other processes (each dialled the other), and the one its process closes
// on exit reached the neighbour ahead of its down now and then (1 launch in 6 of a
// two-worker broadcast whose root left at once), so that it looked lost, not gone.
bool ring_neighbour_down(member_pointer self, const caf::down_msg& dm) {
  auto& st = self->state;
  auto& r = st.ring;
  if (!r.on) return false;
  const bool prev = r.prev && dm.source == r.prev.address(), next = r.next && dm.source == r.next.address();
  if (!prev && !next) return false;
  if ((!prev || r.prev_left) && (!next || r.next_left)) return true;  // it said goodbye first
  const std::uint32_t other = prev ? prev_rank(st) : next_rank(st);
  if (dm.reason != caf::exit_reason::normal) {
    break_ring(self, {errc::stage_lost, worker_name(other) + " is gone (" + describe(dm.reason) + ")" + cannot});
    return true;
  }
  neighbour_left(self, prev, next);
  return true;
}

caf::ok_atom on_ring_goodbye(member_pointer self) {
  auto& r = self->state.ring;
  const auto& sender = self->current_sender();
  if (!r.on || !sender) return caf::ok_atom::value;
  const bool prev = r.prev && sender->address() == r.prev.address();
  const bool next = r.next && sender->address() == r.next.address();
  if (prev || next) neighbour_left(self, prev, next);
  return caf::ok_atom::value;
}

void say_goodbye_to_ring(member_pointer self, std::function<void()> then) {
  auto& r = self->state.ring;
  std::vector<caf::actor> to;
  if (r.on && !r.broken) {
    if (r.prev && !r.prev_left) to.push_back(caf::actor_cast<caf::actor>(r.prev));
    if (r.next && r.next != r.prev && !r.next_left) to.push_back(caf::actor_cast<caf::actor>(r.next));
  }
  if (to.empty()) return then();
  auto waiting = std::make_shared<std::size_t>(to.size());
  auto answered = [waiting, then] {
    if (--*waiting == 0) then();
  };
  for (const auto& n : to)
    self->request(n, std::chrono::seconds(1), ring_atom::value, done_atom::value)
        .then([answered](caf::ok_atom) { answered(); }, [answered](caf::error&) { answered(); });
}

void fail_if_stranded(member_pointer self) {
  auto& r = self->state.ring;
  if (!r.prev_left || r.broken || r.lanes.awaiting_payloads()) return;
  if (!r.turns.empty() && r.turns.front().ring && !r.turns.front().ring->done()) break_ring(self, *r.prev_left);
}

}  // namespace troupe::kv::member_shell
