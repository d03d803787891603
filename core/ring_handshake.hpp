// ring_handshake: how a ring member across nodes wires its two neighbours (Note [Ring
// connections]), decided once for both kinds of ring member: a training member's stage
// (actors/ring_wiring.cpp) and a users' loop (client/kv_member_ring.cpp). The shells dial,
// send and check who sent a hello; this says whom to dial, which hellos to wait for,
// which neighbour a hello wires, when the ring is wired, and who is still silent when the
// deadline comes. CAF-free.
//
// Note [Ring connections]
// Two nodes must not dial each other at once (Note [One connection per neighbour pair] in
// actors/member_wiring.cpp), so of each pair of ring neighbours only the lower seat dials
// and says hello, and the other takes the hello's sender, if the welcome named it, as its
// neighbour; the one connection carries both directions. Seat r < n - 1 dials r + 1 (its
// next); seat 0 also dials n - 1 (its previous), the pair that closes the ring, when
// n > 2. With n = 2 the two neighbours are one actor: seat 0 dials seat 1 once and takes
// it as both. In a users' ring the dialled next answers the hello (an ack: "I know you
// now"), and the dialler's join waits for it, so its first pieces never reach a neighbour
// that would drop them. Every hello (and ack) must come within --request-timeout, or the
// member fails with stage_lost naming the neighbour that stayed silent. A training job's
// seat r is the r-th seat of its ring, which with --local-reduce holds the groups'
// leaders only (Note [Rings of leaders] in core/ring_seats.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace troupe {

class ring_handshake {
 public:
  enum class side : std::uint8_t { prev, next };

  // Seat `index` of a ring of `size` seats (at least 2); `acks`: a dialled next answers
  // the hello, and the ring is wired only once it has.
  ring_handshake(std::uint32_t size, std::uint32_t index, bool acks);

  bool dial_next() const { return dial_next_; }
  bool dial_prev() const { return dial_prev_; }
  // Whether both neighbours are one member (a ring of 2).
  bool one_neighbour() const { return size_ == 2; }
  // Steps still to come before the ring is wired: dials to reach, hellos and acks to hear.
  std::size_t pending() const {
    return static_cast<std::size_t>(to_dial_next_) + to_dial_prev_ + await_prev_ + await_next_ + await_ack_;
  }
  bool wired() const { return pending() == 0; }

  // A dialled neighbour was reached (its handle is known; the shell says hello to it).
  void dialled(side s);
  // A hello came from a member the welcome names as this member's previous (`from_prev`)
  // and/or next neighbour: the side it wires (both, when one_neighbour()), once; nullopt
  // when it wires nothing this member waits for (refuse it).
  std::optional<side> hello(bool from_prev, bool from_next);
  // The dialled next answered the hello; false when no answer was awaited (refuse it).
  bool acked();

  // The neighbour whose hello (or ack) has not come, for the deadline's message; nullopt
  // when none is awaited (a dial that does not connect fails by its own deadline).
  std::optional<side> silent() const;

 private:
  std::uint32_t size_;
  bool dial_next_, dial_prev_;
  bool to_dial_next_, to_dial_prev_;  // dials not reached yet
  bool await_prev_, await_next_, await_ack_;
};

}  // namespace troupe
