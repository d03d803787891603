// ring_mailbox: the same-host fast path between ring neighbours (Note [Ring mailboxes]):
// the sender's outbox, a shared-memory ring of pieces it writes, and the receiver's view
// of it, which hands each piece out as a tensor over that memory and gives the space
// back once the piece is done with.
//
// Note [Ring mailboxes]
// In --mode allreduce every replica sends its right neighbour a stream of pieces (Note
// [The ring] in core/ring_collective.hpp), hundreds per step, and receives as many from
// its left. Between processes of one host they go through shared memory as the
// member-to-shard fast path does (Note [Same-host fast path] in transport/shared_slots.hpp),
// the message carrying only a shared_tensor; but a ring piece has no answer to give a
// slot back, so the sender's segment is a ring buffer with flow control in it:
// - The sender creates the outbox (shm_segment: mode 0600, the job's tag, its ring rank
//   as label) and offers its name to its right neighbour, which maps it if it can (same
//   host, same user, the job's tag, the label of the replica it expects) and answers.
//   Until the answer accepts it, and for good if it refuses, pieces go in the messages.
//   Once accepted the sender removes the name, so a crash leaves nothing behind.
// - Pieces are laid one after another, each a 64-byte header (its ticket and length)
//   and its floats, never wrapping: one that does not fit before the end starts at the
//   beginning. A piece's ticket is its end in bytes ever written, so tickets rise.
// - The receiver takes pieces in the order their messages come, which is the order they
//   were written (CAF keeps a pair's messages in order), and checks each: its segment,
//   that its ticket rises, its bounds, and that its header says the same ticket and
//   length. A piece is a tensor over the mailbox, read and written in place (a running
//   sum is added into it). When every piece up to one is destroyed, the receiver stores
//   that piece's ticket as `released` in the segment; the sender writes only where
//   everything released lies, so it never overwrites a piece the receiver still holds.
// - A full mailbox is no error: the sender's pieces wait, in order, until the receiver
//   has released room (the sender looks again as pieces come and on a short timer), so
//   a mailbox need not hold a whole step. A `released` that goes back or beyond what was
//   written closes the outbox, and the pieces go in the messages from then on.
// - The sender lends buffers in the mailbox (lend) for a piece to be computed straight
//   into, and seals them in the order it lent them; a piece not sealed is skipped over
//   by the receiver's next release.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"
#include "transport/shared_tensor.hpp"
#include "transport/shm_segment.hpp"

namespace troupe::shm {

// The sender's end. Not thread-safe: the sending member's actor owns it.
class ring_outbox {
 public:
  // An outbox of `capacity` bytes of pieces (rounded up to 64) for the ring rank `label`
  // of the job `tag`.
  static expected<ring_outbox> create(std::string_view tag, std::size_t capacity, std::uint64_t label);

  // The receiver mapped it: pieces may go through it now, and its name is removed.
  void accepted();
  // The receiver refused it, or the outbox broke: pieces go in the messages for good.
  void close();
  bool usable() const { return accepted_ && !closed_; }
  bool closed() const { return closed_; }

  // A (numel) f32 tensor in the outbox to compute a piece into, lent until seal(); an
  // empty tensor when the outbox is not usable or has no room now. Lent buffers are
  // sealed in the order they were lent.
  tensor lend(std::int64_t numel);
  // Whether `data` is the start of a buffer lend() gave and seal() did not yet take (even
  // if the outbox closed since: such a piece must travel as a copy).
  bool holds(const std::byte* data) const;
  // The descriptor for the lent buffer `filled` (its whole extent), for the message;
  // buffers lent before it and not sealed are given up. nullopt when `filled` is not a
  // buffer still lent, or the outbox closed meanwhile.
  std::optional<shared_tensor> seal(const_tensor_view filled);
  // Gives up the lent buffer at `data` unsealed (its piece travels some other way); the
  // receiver's next release skips its space.
  void abandon(const std::byte* data);
  // Copies `values` (f32) in and seals it; nullopt (send it in the message) when the
  // outbox is not usable or has no room.
  std::optional<shared_tensor> put(const_tensor_view values);

  const std::string& name() const { return seg_.name(); }
  std::size_t capacity() const { return capacity_; }
  // Bytes of pieces the receiver has not released yet.
  std::uint64_t in_use() const;

  // The outbox bytes a piece of `numel` floats takes (its header included).
  static std::size_t bytes_for(std::int64_t numel);

 private:
  struct lent {
    std::byte* data = nullptr;
    std::uint64_t offset = 0, end = 0;
    std::int64_t numel = 0;
  };
  std::uint64_t released();
  std::optional<lent> reserve(std::int64_t numel);
  shared_tensor stamp(const lent& l);

  segment seg_;
  std::size_t capacity_ = 0;
  std::uint64_t written_ = 0;        // bytes reserved ever (the next piece starts here)
  std::uint64_t sealed_ = 0;         // the end of the last piece sealed
  std::uint64_t last_released_ = 0;  // what the receiver released, as last read
  std::deque<lent> lent_;            // buffers lent and not sealed, oldest first
  bool accepted_ = false, closed_ = false;
};

// The receiver's end: the mapping stays alive while any piece taken from it does.
class ring_inbox {
 public:
  // Maps the outbox `name` of the job `tag`, which ring rank `label` must have made.
  static expected<ring_inbox> open(std::string_view name, std::string_view tag, std::uint64_t label);

  ring_inbox(ring_inbox&&) noexcept = default;
  ring_inbox& operator=(ring_inbox&&) noexcept = default;
  ~ring_inbox();

  // The piece `where` names, as a tensor over the mailbox; refused (with the reason) when
  // it is not a piece of this mailbox that may come now. The sender may reuse its space
  // once the tensor and every piece taken before it are destroyed (on any thread).
  expected<tensor> take(const shared_tensor& where);

  const std::string& name() const;
  // Pieces taken and not destroyed yet.
  std::size_t outstanding() const;

  struct state;  // shared with the tensors it hands out

 private:
  explicit ring_inbox(state* s) : s_(s) {}
  struct orphan {
    void operator()(state* s) const;
  };
  std::unique_ptr<state, orphan> s_;
};

}  // namespace troupe::shm
