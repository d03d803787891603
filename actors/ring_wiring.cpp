// ring_wiring: how a member of a --mode allreduce job across nodes reaches the same stage
// of the previous and the next replica in its ring, as its handshake says (Note [Ring
// connections] in core/ring_handshake.hpp, which a users' loop's ring follows too). In
// one process the welcome's handles are used as they are (member_wiring.cpp).
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::stage_shell {

namespace {

std::string replica_name(stage_pointer self, std::uint32_t replica) {
  const auto& c = *self->state.core;
  if (c.place().job.pipeline_stages == 1) return "worker " + std::to_string(replica);
  return "stage " + std::to_string(c.stage()) + " of replica " + std::to_string(replica);
}

// Takes a hello from a ring neighbour once the welcome said who the neighbours are.
void take_ring_hello(stage_pointer self, const stage_actor& sender, const stage_hello& h) {
  auto& st = self->state;
  const auto ptr = caf::actor_cast<caf::strong_actor_ptr>(sender);
  std::optional<ring_handshake::side> took;
  if (st.ring_wiring && h.stage == st.core->stage())
    took = st.ring_wiring->hello(sent_by(ptr, st.ring_prev_identity), sent_by(ptr, st.ring_next_identity));
  if (!took) {
    const std::string peer = caf::to_string(sender);
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, peer))
      spdlog::warn("{}: refused a ring hello from {} (claiming stage {} of replica {}), which is not a ring "
                   "neighbour it waits for",
                   who(self), peer, h.stage, h.replica);
    return;
  }
  if (*took == ring_handshake::side::prev) {
    st.ring_prev = sender;
    if (st.ring_wiring->one_neighbour()) st.ring_next = sender;
  } else {
    st.ring_next = sender;
  }
  st.ring_step_done();
}

}  // namespace

void wire_ring(stage_pointer self, const worker_welcome& w, std::chrono::steady_clock::time_point deadline,
               const std::shared_ptr<std::size_t>& pending, const std::function<void()>& one_done) {
  auto& st = self->state;
  const member_assignment& place = st.core->place();
  const auto seat = st.core->seat();  // wired by address only when it has one
  st.ring_prev_identity = w.ring_prev_identity;
  st.ring_next_identity = w.ring_next_identity;
  st.ring_prev = st.ring_next = stage_actor{};
  const auto& hs = st.ring_wiring.emplace(seat->size, seat->index, false);
  *pending += hs.pending();
  st.ring_step_done = one_done;
  auto dial = [&](ring_handshake::side side, const std::string& host, std::uint16_t port) {
    const bool next = side == ring_handshake::side::next;
    connect_peer(self, replica_name(self, next ? seat->next : seat->prev), host, port, deadline,
                 [=](caf::strong_actor_ptr p) {
                   auto& s = self->state;
                   auto peer = caf::actor_cast<stage_actor>(std::move(p));
                   (next ? s.ring_next : s.ring_prev) = peer;
                   if (s.ring_wiring->one_neighbour()) s.ring_prev = s.ring_next = peer;
                   s.ring_wiring->dialled(side);
                   self->send(peer, ring_atom::value, stage_hello{s.core->replica(), s.core->stage()});
                   one_done();
                 });
  };
  if (hs.dial_next()) dial(ring_handshake::side::next, place.ring_next_host, place.ring_next_port);
  if (hs.dial_prev()) dial(ring_handshake::side::prev, place.ring_prev_host, place.ring_prev_port);
  for (auto& [sender, h] : std::exchange(st.early_ring_hellos, {})) take_ring_hello(self, sender, h);
  if (st.ring_wiring->silent())
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
  const auto silent = st.ring_wiring ? st.ring_wiring->silent() : std::nullopt;
  if (!silent) return;
  const bool prev = *silent == ring_handshake::side::prev;
  const std::uint32_t other = prev ? st.core->previous_replica() : st.core->next_replica();
  fail(self, {errc::stage_lost, who(self) + " never heard from its ring neighbour " + replica_name(self, other) +
                                    " within --request-timeout; is that node reachable?"});
}

}  // namespace troupe::stage_shell
