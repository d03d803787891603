// The messages of key-value jobs (the client library's), as plain structs: what a member
// asks the coordinator (define a key, find one, set the shards' optimizer, a barrier),
// what the coordinator tells the shards (a key's parts), and a member's pushes and pulls
// of parts. actors/wire.hpp gives them their inspect overloads. Members leave with
// worker_done, as in every job.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/kv_layout.hpp"
#include "core/messages.hpp"
#include "core/ring_collective.hpp"
#include "tensor/optimizer.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

// Member -> coordinator: define key `name` with this value (the first init wins), or wait
// until it exists; answered with the key's layout.
// A value larger than one message (kv_max_message_floats) travels in chunks, in order:
// `value` holds the key's flattened elements [offset, offset + value.numel()). While the
// key does not exist, each chunk before the last is answered with an empty layout (no
// parts): send the next. Once it exists (this member's last chunk defined it, or another
// member's init did), any chunk is answered with the layout, and the rest need not be sent.
struct kv_init {
  std::uint32_t worker = 0;
  std::string name;                 // canonical (kv_key_name)
  std::vector<std::int64_t> dims;
  tensor value;                     // f32 elements of the key, from `offset` on
  std::int64_t offset = 0;
};

// Member -> coordinator: the layout of a key some member initialised.
struct kv_lookup {
  std::uint32_t worker = 0;
  std::string name;
};

// Coordinator -> shard: the parts of a new key that this shard holds, and their values.
struct kv_define {
  std::string name;
  std::vector<kv_part_id> parts;
  std::vector<tensor> values;       // one (numel) f32 tensor per part
};

// Member -> coordinator -> every shard: the shards' optimizer; has_optimizer false: none
// (pulls return what workers update with).
struct kv_set_optimizer {
  std::uint32_t worker = 0;
  bool has_optimizer = true;
  optimizer_config config;
  lr_schedule schedule;
};

// Member -> coordinator: answered once every live member has arrived.
struct kv_barrier {
  std::uint32_t worker = 0;
};

// Member -> shard: the one push of every job (Note [Rounds per part] in
// core/shard_core.hpp), gradients of some parts concatenated in the order of `parts`.
// A user's loop pushes its keys' parts, each the member's next push of it. A training
// member pushes the one part of its stage (stage_part) with its step as the stated clock,
// whole or a piece of it (Note [Gradient pieces] in core/shard_core_pieces.cpp); such a
// push counts as that clock's submission even when it is refused.
struct kv_push {
  static constexpr std::int64_t no_clock = -1;
  std::uint32_t shard = 0, worker = 0;
  std::vector<kv_part_id> parts;
  std::vector<std::int64_t> base_versions;  // per part: the version this member last pulled
  tensor data;                               // f32, the parts' numel summed; empty when shared is set
  shared_tensor shared;                      // the same-host fast path: where data lies instead
  lane_tensor lane{};                        // or data's ticket on the bulk lane (transport/lane.hpp)
  std::int64_t clock = no_clock;             // a training member's step; no_clock: a user's loop's push
  // A training member's piece of its part: where it starts and its element count; 0: whole.
  std::int64_t piece_offset = 0;
  std::int64_t piece_numel = 0;
  bool states_clock() const { return clock != no_clock; }
};

// A training member's push of `grad` (encoded or not) for its stage's part at `clock`.
inline kv_push step_push(std::uint32_t shard, std::uint32_t worker, std::uint32_t stage, std::int64_t clock,
                         std::int64_t base_version, tensor grad) {
  kv_push p;
  p.shard = shard;
  p.worker = worker;
  p.parts = {stage_part(stage)};
  p.base_versions = {base_version};
  p.data = std::move(grad);
  p.clock = clock;
  return p;
}

struct kv_push_ack {
  std::vector<std::int64_t> versions, staleness;  // per part
  // sync with backup workers: the round closed without it, so it was dropped; versions
  // holds the open round, where the sender goes on (Note [Backup workers] in
  // core/shard_core_rules.cpp)
  bool late = false;
};

// Member -> shard: the one pull of every job, the values of some parts (rows[i] empty:
// all of part i; else those rows of it, relative to the part), concatenated in the reply.
// A user's loop's pull is answered after the pushes it made of each part (Note [Rounds
// per part] in core/shard_core.hpp). A training member pulls the one part of its stage
// (stage_part) with its step as the stated clock, whole or a piece of it (layer-by-layer
// pulls, Note [Gradient buckets] in core/gradient_buckets.hpp).
struct kv_pull {
  static constexpr std::int64_t no_clock = -1;
  std::uint32_t shard = 0, worker = 0;
  std::vector<kv_part_id> parts;
  std::vector<std::vector<std::int64_t>> rows;
  std::vector<std::int64_t> row_numel;       // per part: elements per row
  shared_tensor reply_to;                    // the same-host fast path: a slot for the answer
  std::uint64_t lane_reply = 0;              // or the ticket to answer under on the bulk lane
  // --pull-precision 2bit: answer in f32, as the member holds no view (Note [2-bit
  // key-value pulls] in client/pulled_views.hpp, Note [2-bit pulls] in core/pull_views.hpp)
  bool full = false;
  std::int64_t clock = no_clock;             // a training member's step; no_clock: a user's loop's pull
  // A training member's piece of its part: where it starts and its element count; 0: whole.
  std::int64_t piece_offset = 0;
  std::int64_t piece_numel = 0;
  bool states_clock() const { return clock != no_clock; }
};

// A training member's pull of its stage's part at `clock`; `full`: in 2 bits, it holds no view.
inline kv_pull step_pull(std::uint32_t shard, std::uint32_t worker, std::uint32_t stage, std::int64_t clock,
                         bool full = false) {
  kv_pull r;
  r.shard = shard;
  r.worker = worker;
  r.parts = {stage_part(stage)};
  r.rows.resize(1);  // the whole part
  r.row_numel = {0};
  r.full = full;
  r.clock = clock;
  return r;
}

struct kv_pull_reply {
  std::uint32_t shard = 0;
  std::vector<std::int64_t> versions;        // per part
  tensor data;                               // empty when shared or lane is set
  shared_tensor shared;                      // the slot reply_to offered, now holding the answer
  lane_tensor lane{};                        // or the answer's ticket on the bulk lane
  std::int64_t piece_offset = 0;             // the pull's piece (data holds piece_numel elements)
  std::int64_t piece_numel = 0;
};

// What a collective does with its members' pieces (Note [Collectives on the shards] in
// core/collective_rounds.hpp).
enum class collective_kind : std::uint8_t {
  reduce,     // every member gives n elements; each gets their reduction by `op`
  broadcast,  // the root gives n elements; each gets them
  allgather,  // each member gives its own count of elements; each gets them all, in rank order
  sizes,      // each member gives its tensor's shape; each gets every member's shape
};
inline constexpr collective_kind last_collective_kind = collective_kind::sizes;

// Member -> shard: this member's piece of one collective, answered once every member the
// collective waits for has given its piece.
struct kv_collective {
  std::uint32_t shard = 0, worker = 0;
  std::string name;                // the piece's name, the same on every member
  collective_kind kind = collective_kind::reduce;
  reduce_op op = reduce_op::sum;   // reduce
  std::uint32_t root = 0;          // broadcast
  std::vector<std::int64_t> dims;  // sizes: this member's shape; otherwise {n}, the elements given
                                   // (broadcast: the root's, which every member states)
  tensor data;                     // f32, n elements; a broadcast's non-roots and sizes: empty
  shared_tensor shared;            // the same-host fast path: where data lies instead
  shared_tensor reply_to;          // the same-host fast path: a slot for the answer's data
  lane_tensor lane{};              // or data's ticket on the bulk lane (transport/lane.hpp)
  std::uint64_t lane_reply = 0;    // or the ticket to answer under on the bulk lane
};

struct kv_collective_reply {
  std::vector<std::uint32_t> ranks;             // the members that took part, ascending
  std::vector<std::vector<std::int64_t>> dims;  // sizes: each one's shape; allgather: each one's {n}
  tensor data;                                  // the result (allgather: the pieces in rank order)
  shared_tensor shared;                         // the slot reply_to offered, now holding data
  lane_tensor lane{};                           // or the answer's ticket on the bulk lane
};

}  // namespace troupe
