// doorbell: the request and answer queues in a same-host channel's segment, through which
// a member and a shard exchange their push and pull messages without the network (Note
// [Doorbells]). Plain memory and futex words; the threads that wait on the words are
// transport/word_waiter's, the messages' encoding the shells'.
//
// Note [Doorbells]
// The same-host fast path (Note [Same-host fast path] in transport/shared_slots.hpp) puts a
// tensor in shared memory, but its descriptor still went as an actor message: from the
// member's thread to its node's middleman, over a socket (TLS by default) to the shard's
// middleman, to the shard's actor, and the answer back the same way. Each hop is a thread
// wake-up and a pass through CAF's network stack, on the two cores that also compute: a
// launched job's pull took about 600 us more than the same pull inside one process.
// Once a channel is confirmed, the member and the shard exchange those messages through
// the channel's segment instead:
// - Behind the reply slot lies a bell block: a queue of request records (the member
//   writes, the shard reads) and a queue of answer records (the shard writes, the member
//   reads), each a ring of `bell_records` records with a count of records posted, which
//   is a futex word, and a count taken. A record is the message's bytes as the shells
//   serialise them (at most `bell_record_bytes`); the tensor itself stays in its slot.
// - A shard that maps a channel marks its bell block `listening` and watches the request
//   count (transport/word_waiter: one thread for every channel of the shard); a member uses the
//   doorbell only once its channel is confirmed and the shard listens, for pulls that
//   offer the reply slot and pushes in the push slot. Whatever else it sends (a slot it
//   could not lend, a full queue) goes as an actor message.
// - Posting writes the record, then publishes the new count (release) and wakes every
//   thread that waits on it; the waiter nudges the reader's actor, which takes every
//   record posted, in order. A shard's actor, idle when nudged, runs on the waiter's own
//   thread (Note [Nudging inline] in actors/inline_nudge.hpp). Each side writes only its
//   own counts and records, so a queue never needs a lock; a count that says more than a
//   full ring was posted is corrupt, and the reader closes the doorbell (the member's
//   calls then fail or time out as any request does).
// - Trust is the fast path's: only processes of the job's user can open the segment, and
//   a shard takes a request only as the member whose segment it came from (the header's
//   label, checked when the segment was mapped); a record names its sender's rank, which
//   must be that one.
// - A member's calls through the doorbell keep the request timeout of their actor
//   messages; one that passes it closes the channel, as a timed-out request does.
// - Each side wakes the other once per batch: a member after carrying out a list of
//   actions (a step's push and pull together), a shard after serving everything posted
//   (their two answers together). A round trip costs two wake-ups, as in one process:
//   the shard's waiter, which serves the calls itself, and the member's own thread, which
//   waits for the answers itself when it has nothing else to do (Note [Waiting for the
//   answers] in actors/stage_bells.cpp); measured with tools/bench/modes (the README's
//   table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace troupe::shm {

inline constexpr std::size_t bell_record_bytes = 1024;  // a record's bytes, its length included
inline constexpr std::size_t bell_records = 4;          // records in flight in each direction
inline constexpr std::size_t bell_record_payload = bell_record_bytes - 8;

// One direction of a bell block: a single-writer, single-reader ring of records in shared
// memory. A view; the segment owns the memory.
class bell_queue {
 public:
  // `base`: 64-byte aligned, `bytes()` long.
  explicit bell_queue(std::byte* base) : base_(base) {}
  static constexpr std::size_t bytes() { return 128 + bell_records * bell_record_bytes; }

  // The writer's side: false when the ring is full or the record is longer than
  // bell_record_payload (nothing is written then).
  bool post(std::span<const std::byte> record);
  // Wakes every thread that waits on the count (the reader's waiter, and the reader's own
  // thread when it waits for an answer itself), after posting.
  void ring() const;

  // The reader's side: the next record, nullopt when none is posted. `corrupt` is set when
  // the writer's count says more than a full ring was posted, or a record's length is
  // beyond the payload (nothing is taken then, and the queue should be closed).
  std::optional<std::vector<std::byte>> take(bool& corrupt);

  // The futex word the reader waits on: the count of records posted.
  std::uint32_t* posted_word() const { return reinterpret_cast<std::uint32_t*>(base_); }
  // The reader's side: whether a record waits to be taken; `posted` is set to the count it
  // read, the value to wait on when none does.
  bool unread(std::uint32_t& posted) const;

 private:
  std::uint32_t* taken_word() const { return reinterpret_cast<std::uint32_t*>(base_ + 64); }
  std::byte* record(std::uint32_t n) const { return base_ + 128 + (n % bell_records) * bell_record_bytes; }
  std::byte* base_;
};

// A channel's bell block: whether the shard listens, the member's requests and the shard's
// answers.
class bell_block {
 public:
  explicit bell_block(std::byte* base) : base_(base), requests_(base + 64), answers_(base + 64 + bell_queue::bytes()) {}
  static constexpr std::size_t bytes() { return 64 + 2 * bell_queue::bytes(); }

  // The shard sets it once it watches the requests; the member rings only after.
  void set_listening() const;
  bool listening() const;

  std::byte* base() const { return base_; }
  bell_queue& requests() { return requests_; }
  bell_queue& answers() { return answers_; }

 private:
  std::byte* base_;
  bell_queue requests_, answers_;
};

}  // namespace troupe::shm
