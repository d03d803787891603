// pull_answer: a shard's answer to a key-value pull, checked, then copied into the
// caller's arrays: from the fast path's reply slot in shared memory, from the message in
// f32, or decoded from the job's --pull-precision (fp16, bf16, or 2-bit codes added to
// the member's views). An answer of the wrong
// size, dtype or number of versions, or in shared memory this member did not offer, is
// a malformed fault naming the shard, and writes nothing into the caller's arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "client/kv_transport.hpp"
#include "client/pulled_views.hpp"
#include "core/kv_messages.hpp"
#include "tensor/grad_codec.hpp"
#include "transport/shard_call.hpp"

namespace troupe::kv {

// Copies the answer `reply` of `call`'s shard to a pull of `parts` (`total` floats in all)
// into the parts' arrays, from the fast path's reply slot the call offered (borrowed until
// the caller settles it) or from the message (in `precision`; with
// 2-bit pulls through `views`, Note [2-bit key-value pulls] in client/pulled_views.hpp);
// each part's version, or why not.
or_fault<std::vector<part_result>> unpack_pull(kv_pull_reply& reply, const std::vector<pull_part>& parts,
                                               std::int64_t total, shard_call& call, const grad_codec& precision,
                                               pulled_views* views = nullptr);

}  // namespace troupe::kv
