// ring_link: a ring member's same-host links to its neighbours (Note [Ring mailboxes] in
// transport/ring_mailbox.hpp), for every kind of ring member: a --mode allreduce training
// member (its core computes each outgoing piece where the link says; its shell,
// actors/stage_ring_mailbox.cpp, carries the offers and sends) and a key-value member in
// a ring of users' loops (client/kv_member_ring.cpp). The outbox to the next member is
// made with the member's first piece and offered to it; once accepted, each piece's values
// go through it, and pieces that find no room wait, in order, for the shell to drain them
// after a pause. The inbox from the previous member is mapped when it offers one. What
// cannot go through a mailbox goes in the messages (or on a lane: the shell's choice).
// CAF-free; one thread (the member's) uses it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "core/ring_collective.hpp"
#include "tensor/tensor.hpp"
#include "transport/ring_mailbox.hpp"

namespace troupe {

class ring_link {
 public:
  // The most shared memory one outbox takes. Pieces that find no room wait for it, and are
  // copied twice (computed aside, then copied in); 64 MiB holds the first burst of a step
  // (a replica's own chunk) for gradients up to 128 MB between two replicas. Measured with
  // 2 replicas and a 105 MB gradient: 8 MiB 80 ms a step, 64 MiB 55 ms, 256 MiB 56-59 ms.
  static constexpr std::size_t max_outbox_bytes = std::size_t{64} << 20;
  // Pieces of fewer floats go in the messages, in order with the rest: a slot saves them
  // no copy worth its cost (measured on the users' ring with 1,024 floats: 0.32 ms a call
  // through the mailbox, 0.24 in the messages); the channel pool keeps the same bound.
  static constexpr std::int64_t min_mailbox_numel = 4096;

  // --- The outbox to the next member.
  // Makes an outbox of `bytes` for ring rank `label` of the job whose fast-path tag is
  // `tag`: the segment's name, to offer; or why not (pieces then go another way).
  expected<std::string> make_outbox(std::string_view tag, std::size_t bytes, std::uint64_t label);
  // The next member's answer about `segment`: ignored when that is not the outbox offered
  // and awaiting an answer; else accepted (pieces go through it from now on) or refused
  // (the outbox is dropped: pieces go another way).
  enum class answer { ignored, accepted, refused };
  answer take_answer(const std::string& segment, bool accepted);
  std::size_t outbox_bytes() const { return out_ ? out_->capacity() : 0; }

  // Where the core computes an outgoing piece of `numel` floats: a buffer in the outbox
  // when it takes pieces, none waits (a piece lent now would overtake them) and the piece
  // is not too small for it; empty: a fresh tensor.
  tensor piece_buffer(std::int64_t numel);

  // Passes piece p on: to `send` now (its values sealed in the outbox, or in the message:
  // a small piece, or one copied out of an outbox that cannot take it), or kept to wait
  // behind the pieces that already do. True: it waits; drain() sends what may go.
  using sender = std::function<void(ring_piece&)>;
  bool pass(ring_piece p, const sender& send);
  // Sends the waiting pieces that may go now, in order (an outbox that closed takes none:
  // they go in the messages). True: some still wait for room.
  bool drain(const sender& send);
  bool waiting() const { return !waiting_.empty(); }
  // The next member is gone: what waits for it is dropped.
  void drop_waiting() { waiting_.clear(); }

  // --- The inbox from the previous member.
  // The previous member (ring rank `prev_label`) offers its outbox `segment`: mapped
  // (nullopt), or why not, for the answer.
  std::optional<std::string> take_offer(const std::string& segment, std::string_view tag, std::uint64_t prev_label);
  // A piece that names the inbox gets its values from it (borrowed from the mailbox until
  // the piece is destroyed); why not, when it names a mailbox never mapped, carries its
  // values twice, or is not a piece that may come now.
  std::optional<std::string> fill(ring_piece& p);

 private:
  // Whether p goes in the message even while the outbox takes pieces.
  static bool small(const ring_piece& p) { return !p.values.empty() && p.values.numel() < min_mailbox_numel; }
  // Moves the piece's values into the outbox when there is room: sealed where they were
  // computed, or copied in. False: no room (or the outbox is closed).
  bool into_outbox(ring_piece& p);
  // A piece computed in the outbox that goes another way travels as a copy (the mapping
  // may go before its message is serialized), and its space is given up.
  void out_of_outbox(ring_piece& p);

  std::optional<shm::ring_outbox> out_;
  std::deque<ring_piece> waiting_;  // in the order they go: none may overtake them
  std::optional<shm::ring_inbox> in_;
};

}  // namespace troupe
