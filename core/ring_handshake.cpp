// ring_handshake: whom a ring member dials and waits for (Note [Ring connections]).
#include "core/ring_handshake.hpp"

#include <utility>

namespace troupe {

ring_handshake::ring_handshake(std::uint32_t size, std::uint32_t index, bool acks)
    : size_(size),
      dial_next_(index + 1 < size),
      dial_prev_(index == 0 && size > 2),
      to_dial_next_(dial_next_),
      to_dial_prev_(dial_prev_),
      await_prev_(index >= 1),
      await_next_(index + 1 == size && size > 2),
      await_ack_(acks && dial_next_) {}

void ring_handshake::dialled(side s) { (s == side::next ? to_dial_next_ : to_dial_prev_) = false; }

std::optional<ring_handshake::side> ring_handshake::hello(bool from_prev, bool from_next) {
  if (from_prev && await_prev_) {
    await_prev_ = false;
    return side::prev;
  }
  if (from_next && await_next_) {
    await_next_ = false;
    return side::next;
  }
  return std::nullopt;
}

bool ring_handshake::acked() { return std::exchange(await_ack_, false); }

std::optional<ring_handshake::side> ring_handshake::silent() const {
  if (await_prev_) return side::prev;
  if (await_next_ || await_ack_) return side::next;
  return std::nullopt;
}

}  // namespace troupe
