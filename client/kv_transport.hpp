// kv_transport: how a kvstore reaches the shards of its job, one implementation per kind
// of job (in-process shards: local_transport). The store validates keys and arrays,
// splits calls into parts per shard and keeps the handles; a transport only carries parts
// to shards and answers back. Completions may run on any thread, at most once each.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/errc.hpp"
#include "client/caller_memory.hpp"
#include "client/kvstore.hpp"
#include "core/job.hpp"
#include "core/kv_layout.hpp"
#include "core/kv_messages.hpp"
#include "core/shard_core.hpp"
#include "tensor/tensor.hpp"

namespace troupe::kv {

struct push_part {
  kv_part_id part = 0;
  std::int64_t base_version = 0;  // the part's version this worker last pulled
  const float* data = nullptr;    // the part's numel floats; caller-owned until the completion
  std::int64_t numel = 0;
};

struct pull_part {
  kv_part_id part = 0;
  float* out = nullptr;           // caller-owned until the completion
  std::int64_t numel = 0;         // floats written to out
  std::vector<std::int64_t> rows; // row_sparse: these rows (relative to the part), row_numel each
  std::int64_t row_numel = 0;
};

struct part_result {
  kv_part_id part = 0;
  std::int64_t version = 0;
  std::int64_t staleness = 0;     // pushes only
};

using completion = std::function<void(std::optional<fault>, std::vector<part_result>)>;

// Views of n floats in caller-owned memory.
inline const_tensor_view floats(const float* p, std::int64_t n) {
  return {reinterpret_cast<const std::byte*>(p), dtype::f32, shape{n}};
}
inline tensor_view floats(float* p, std::int64_t n) { return {reinterpret_cast<std::byte*>(p), dtype::f32, shape{n}}; }

template <class T>
using or_fault = std::variant<T, fault>;

class kv_transport {
 public:
  virtual ~kv_transport() = default;
  virtual std::uint32_t rank() const = 0;
  virtual std::uint32_t workers() const = 0;
  virtual sync_mode mode() const = 0;
  virtual std::uint32_t shards() const = 0;
  // The step of the checkpoint a resumed job goes on from (Note [Key-value checkpoints]);
  // 0 for a fresh job.
  virtual std::int64_t resumed_step() const { return 0; }
  // The step a replaced shard's keys went back to, the newest (Note [Replacing a key-value
  // shard]); none in one process, or while no shard was lost.
  virtual std::optional<std::int64_t> restored_step() const { return std::nullopt; }
  // Blocks until key `name` exists on its shards, defining it with `initial` when this is
  // the job's first init of it; the key's layout, or why not.
  virtual or_fault<kv_key_layout> init(const std::string& name, const std::vector<std::int64_t>& dims,
                                       const_tensor_view initial) = 0;
  // The layout of a key some worker initialised, or no_such_key.
  virtual or_fault<kv_key_layout> lookup(const std::string& name) = 0;
  // One message to `shard` with these parts; `done` runs once every part is answered or
  // the request failed. The parts' arrays are used after the call returns only between
  // memory's enter() and leave(), and not once it is revoked (Note [Abandoned calls]).
  virtual void push(std::uint32_t shard, std::vector<push_part> parts, std::shared_ptr<caller_memory> memory,
                    completion done) = 0;
  virtual void pull(std::uint32_t shard, std::vector<pull_part> parts, std::shared_ptr<caller_memory> memory,
                    completion done) = 0;
  virtual std::optional<fault> set_optimizer(const std::optional<kv_optimizer>& opt) = 0;
  virtual std::optional<fault> barrier(std::chrono::milliseconds timeout) = 0;
  // One piece of a collective (Note [Collectives on the shards]) to `shard`, which fills in
  // the sender's rank and its data: piece.dims[0] floats at `data`, read before the call
  // returns (nullptr: the piece carries none). `done` runs once, with the round's answer
  // (its data in reply.data, valid during the call) or why not, within `timeout`.
  // `answer_numel`: the answer's elements when the caller knows them (a slot of the
  // same-host fast path may take it), else 0.
  virtual void collective(std::uint32_t shard, kv_collective piece, const float* data, std::int64_t answer_numel,
                          std::chrono::milliseconds timeout,
                          std::function<void(or_fault<kv_collective_reply>)> done) = 0;
  // --mode allreduce with a command (shards() == 0): one collective round the members'
  // ring (Note [A ring of users' loops] in client/kv_member_ring.cpp). kind 0: all-reduce
  // of `values` by `op`; 1: broadcast of root's `values`; 2: all-gather of `values` into a
  // tensor of the sum of `counts` (one per rank). The result, or why not, within `timeout`.
  struct ring_request {
    std::uint8_t kind = 0;
    std::string name;
    reduce_op op = reduce_op::sum;
    std::uint32_t root = 0;
    tensor values;
    std::vector<std::int64_t> counts;
    std::chrono::milliseconds timeout{0};
  };
  virtual or_fault<tensor> ring(ring_request) {
    return fault{errc::bad_job, "this store's job has shard servers; its collectives go through them"};
  }
  // The loop ended its step `number`, computing for `busy_seconds` of it (Note [Steps of a
  // user's loop] in client/step_meter.hpp): a step report to the coordinator, which names
  // stragglers from them. In one process there is no coordinator: nothing.
  virtual void report_step(std::int64_t /*number*/, double /*busy_seconds*/) {}
  // Leaves the job; pending completions run with an error or not at all.
  virtual void close() = 0;
  // In one process nothing is moved: zeros.
  virtual transfer_stats transfers() const { return {}; }
};

}  // namespace troupe::kv
