// ring_link: a --mode allreduce member's way to the next replica of its ring, shared by its
// core, which computes each outgoing piece where the link says, and its shell, which makes
// and offers the outbox, passes the pieces on, and keeps those that wait for room
// (actors/stage_ring_mailbox.cpp). CAF-free; one thread (the member's) uses it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

#include "core/ring_collective.hpp"
#include "tensor/tensor.hpp"
#include "transport/ring_mailbox.hpp"

namespace troupe {

struct ring_link {
  // The outbox to the next replica on this host (Note [Ring mailboxes] in
  // transport/ring_mailbox.hpp): made and offered with the member's first piece, and
  // taking pieces once the next replica accepted it.
  std::optional<shm::ring_outbox> out;
  // Pieces that wait for room in it, in the order they go: none may overtake them.
  std::deque<ring_piece> waiting;

  // Where the core computes an outgoing piece of `numel` floats: a buffer in the outbox
  // when it takes pieces and none waits (a piece lent now would overtake them); empty: a
  // fresh tensor.
  tensor piece_buffer(std::int64_t numel) {
    return out && out->usable() && waiting.empty() ? out->lend(numel) : tensor{};
  }
};

}  // namespace troupe
