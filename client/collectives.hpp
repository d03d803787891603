// collectives: a store's allreduce, broadcast and allgather (Note [Collectives on the
// shards] in core/collective_rounds.hpp). The tensor is cut into pieces of at most
// `piece_bound` elements, piece i going to shard i mod (shards); every piece is sent at
// once, and the answers are written back into the caller's array as they come. A call
// that fails or times out revokes the array (Note [Abandoned calls]): nothing touches it
// after the call returns. In a job with no shards (--mode allreduce with a command) a
// call goes round the members' ring instead, on a copy of the caller's array (Note [A
// ring of users' loops] in client/kv_member_ring.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/kv_transport.hpp"

namespace troupe::kv {

struct collective_call {
  std::string name;                   // the same on every member for the same call
  std::chrono::milliseconds timeout;  // for the whole call
  std::int64_t piece_bound = kv_max_message_floats;  // the most elements one piece's answer holds
};

// Every live member's n elements of `in`, reduced by `op`, into `out` (which may be `in`).
std::optional<fault> run_allreduce(kv_transport& t, const collective_call& call, const float* in, float* out,
                                   std::int64_t n, reduce_op op);
// The root's n elements of `value` into every member's `value`.
std::optional<fault> run_broadcast(kv_transport& t, const collective_call& call, float* value, std::int64_t n,
                                   std::uint32_t root);

struct gathered_tensor {
  std::vector<float> data;             // every member's tensor, in rank order
  std::vector<std::int64_t> dims;      // the first extent summed, the others the members' own
  std::vector<std::uint32_t> ranks;    // the members that took part, ascending
  std::vector<std::int64_t> rows;      // each one's first extent, in the order of ranks
};
// Every live member's tensor `in` of shape `dims` (at least one extent; the extents after
// the first equal on every member), concatenated along the first.
or_fault<gathered_tensor> run_allgather(kv_transport& t, const collective_call& call, const float* in,
                                        const std::vector<std::int64_t>& dims);

}  // namespace troupe::kv
