// ring_wiring: how a member of a --mode allreduce job across nodes reaches the same stage
// of the previous and the next replica in its ring (Note [Ring connections]). In one
// process the welcome's handles are used as they are (member_wiring.cpp).
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::stage_shell {

// Note [Ring connections]
// Two nodes must not dial each other at once (Note [One connection per neighbour pair] in
// member_wiring.cpp), so of each pair of ring neighbours only the lower replica dials and
// says hello, and the other takes the hello's sender, if the welcome named it, as its
// neighbour; the one connection carries both directions. Replica r < n - 1 dials r + 1
// (its next); replica 0 also dials n - 1 (its previous), the pair that closes the ring,
// when n > 2. With n = 2 the two neighbours are one actor: replica 0 dials replica 1 once
// and takes it as both. Every hello must come within --request-timeout, or the member
// fails with stage_lost naming the neighbour that never said hello. "Replica r" here is
// the r-th seat of the ring, which with --local-reduce holds the groups' leaders only
// (Note [Rings of leaders] in core/ring_seats.cpp).
namespace {

std::string replica_name(stage_pointer self, std::uint32_t replica) {
  const auto& c = *self->state.core;
  if (c.place().job.pipeline_stages == 1) return "worker " + std::to_string(replica);
  return "stage " + std::to_string(c.stage()) + " of replica " + std::to_string(replica);
}

// The replicas in this member's ring.
std::uint32_t ring_size(stage_pointer self) {
  return static_cast<std::uint32_t>(self->state.core->place().ring.size());
}

// Takes a hello from a ring neighbour once the welcome said who the neighbours are.
void take_ring_hello(stage_pointer self, const stage_actor& sender, const stage_hello& h) {
  auto& st = self->state;
  const auto ptr = caf::actor_cast<caf::strong_actor_ptr>(sender);
  const bool as_prev = st.on_ring_prev_hello && sent_by(ptr, st.ring_prev_identity);
  const bool as_next = st.on_ring_next_hello && sent_by(ptr, st.ring_next_identity);
  if ((!as_prev && !as_next) || h.stage != st.core->stage()) {
    const std::string peer = caf::to_string(sender);
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, peer))
      spdlog::warn("{}: refused a ring hello from {} (claiming stage {} of replica {}), which is not a ring "
                   "neighbour it waits for",
                   who(self), peer, h.stage, h.replica);
    return;
  }
  if (as_prev) {
    st.ring_prev = sender;
    if (ring_size(self) == 2) st.ring_next = sender;
    std::exchange(st.on_ring_prev_hello, nullptr)();
  } else {
    st.ring_next = sender;
    std::exchange(st.on_ring_next_hello, nullptr)();
  }
}

}  // namespace

void wire_ring(stage_pointer self, const worker_welcome& w, std::chrono::steady_clock::time_point deadline,
               const std::shared_ptr<std::size_t>& pending, const std::function<void()>& one_done) {
  auto& st = self->state;
  const member_assignment& place = st.core->place();
  const auto seat = st.core->seat();  // wired by address only when it has one
  const std::uint32_t n = seat->size, r = seat->index;
  st.ring_prev_identity = w.ring_prev_identity;
  st.ring_next_identity = w.ring_next_identity;
  st.ring_prev = st.ring_next = stage_actor{};
  const bool dial_next = r + 1 < n, dial_prev = r == 0 && n > 2;
  const bool await_prev = r >= 1, await_next = r == n - 1 && n > 2;
  *pending += dial_next + dial_prev + await_prev + await_next;
  if (await_prev) st.on_ring_prev_hello = one_done;
  if (await_next) st.on_ring_next_hello = one_done;
  auto dial = [&](bool next, const std::string& host, std::uint16_t port) {
    const std::uint32_t other = next ? seat->next : seat->prev;
    connect_peer(self, replica_name(self, other), host, port, deadline, [=](caf::strong_actor_ptr p) {
      auto& s = self->state;
      auto peer = caf::actor_cast<stage_actor>(std::move(p));
      (next ? s.ring_next : s.ring_prev) = peer;
      if (n == 2) s.ring_prev = s.ring_next = peer;
      self->send(peer, ring_atom::value, stage_hello{s.core->replica(), s.core->stage()});
      one_done();
    });
  };
  if (dial_next) dial(true, place.ring_next_host, place.ring_next_port);
  if (dial_prev) dial(false, place.ring_prev_host, place.ring_prev_port);
  for (auto& [sender, h] : std::exchange(st.early_ring_hellos, {})) take_ring_hello(self, sender, h);
  if (st.on_ring_prev_hello || st.on_ring_next_hello)
    self->delayed_send(self, std::chrono::milliseconds(place.job.request_timeout_ms), hello_deadline{});
}

void on_ring_hello(stage_pointer self, const stage_hello& h) {
  auto& st = self->state;
  auto sender = caf::actor_cast<stage_actor>(self->current_sender());
  if (st.core->phase() == member_phase::joining) {
    if (st.early_ring_hellos.size() < 2) st.early_ring_hellos.emplace_back(std::move(sender), h);
    return;
  }
  take_ring_hello(self, sender, h);
}

void on_ring_hello_deadline(stage_pointer self) {
  auto& st = self->state;
  if (!st.on_ring_prev_hello && !st.on_ring_next_hello) return;
  const std::uint32_t other = st.on_ring_prev_hello ? st.core->previous_replica() : st.core->next_replica();
  fail(self, {errc::stage_lost, who(self) + " never heard from its ring neighbour " + replica_name(self, other) +
                                    " within --request-timeout; is that node reachable?"});
}

}  // namespace troupe::stage_shell
