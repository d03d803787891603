// troupe::kv::kvstore, the client library's public API: a training loop in its own
// process (or thread) joins a Troupe job as a worker and pushes gradients to, and pulls
// parameters from, Troupe's shard servers with MXNet KVStore semantics. Installed with
// libtroupe; this header needs nothing but the standard library.
//
//   auto kv = troupe::kv::kvstore::open({.type = "local"});
//   kv->init("fc1.weight", {w.data(), {256, 784}});
//   auto h = kv->push({"fc1.weight"}, {{g.data(), {256, 784}}});
//   kv->pull({"fc1.weight"}, {{w.data(), {256, 784}}});
//   kv->wait_all();
//
// Contracts:
// - Keys are integers or UTF-8 strings; 3 and "3" are different keys. Values are
//   contiguous float32 arrays the caller owns. push() reads and pull() writes the
//   caller's memory directly: it must stay alive and untouched until wait() returns for
//   the handle (or wait_all()), normally or by throwing.
// - init(key, value): the first init of a key in the job defines its shape and value;
//   a later init with the same shape returns once the key exists (its value is ignored),
//   another shape is an error.
// - Modes (Note [Rounds per part] in core/shard_core.hpp): sync sums one push of each
//   key from every live worker per round, and a pull returns only after the puller's own
//   pushes of the key are applied; async applies every push on arrival; ssp holds a pull
//   while the puller is more than `staleness` pushes of that key ahead of the slowest.
// - With set_optimizer() the shards update the parameters (MXNet's update_on_kvstore);
//   without it a pull returns what workers update with themselves: the round's summed
//   gradient in sync, the latest pushed gradient in async and ssp.
// - Every failure is a troupe::kv::error with a code and a message naming the key or
//   setting; a failed push or pull is reported by wait() of its handle (and wait_all()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace troupe::kv {

using key = std::variant<std::int64_t, std::string>;

// A contiguous float32 array owned by the caller, in row-major order.
struct array {
  float* data = nullptr;
  std::vector<std::int64_t> shape;  // {} for a scalar
};
struct const_array {
  const float* data = nullptr;
  std::vector<std::int64_t> shape;
  const_array() = default;
  const_array(const float* d, std::vector<std::int64_t> s) : data(d), shape(std::move(s)) {}
  const_array(const array& a) : data(a.data), shape(a.shape) {}
};

// A failure of the store or the job: `code()` is the name of Troupe's error code
// ("bad_shape", "no_such_key", "timed_out", "shard_lost", ...), what() says what is wrong.
class error : public std::runtime_error {
 public:
  error(std::string code, const std::string& message)
      : std::runtime_error(code + ": " + message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

// The shards' optimizer (MXNet's update_on_kvstore): sgd (momentum, nesterov), adam or
// adamw, with weight decay (L2; decoupled in adamw) and a learning-rate schedule indexed
// by each key's update count.
struct optimizer_spec {
  std::string kind = "sgd";         // sgd | adam | adamw
  float lr = 0.01f;
  float momentum = 0.f;             // sgd
  bool nesterov = false;            // sgd
  float weight_decay = 0.f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam and adamw
  std::string schedule = "constant";  // constant | cosine | linear
  std::int64_t warmup_updates = 0;
  std::int64_t total_updates = 1;     // cosine and linear decay to lr * final_fraction here
  float final_fraction = 0.f;
};

struct options {
  // local: the shards live in this process (one worker, or open_local_group's workers).
  // dist_sync | dist_async | dist_ssp: join the job that `troupe launch` started, as the
  // TROUPE_* environment describes it (an error when the job runs another mode); dist:
  // join it in whatever mode it runs.
  std::string type = "local";
  std::string mode = "sync";                 // local only: sync | async | ssp
  std::uint32_t servers = 1;                 // local only: shards in this process
  std::int32_t staleness = 2;                // ssp bound (local; a launched job's is the job's)
  std::int64_t big_array_bound = 1000000;    // split keys above this many elements across shards
  std::chrono::milliseconds timeout{300000}; // every wait, init and barrier
};

// A push or pull in flight.
using handle = std::uint64_t;

// What a store moved to and from shards in other processes, by path: the same-host fast
// path's shared-memory slots, or the network's messages (bytes as sent: encoded, with the
// job's --compression and --pull-precision). Pushes are counted when sent, pulls when
// answered; a "local" store moves nothing and counts zeros.
struct transfer_stats {
  std::uint64_t shared_memory_calls = 0, network_calls = 0;
  std::uint64_t shared_memory_bytes = 0, network_bytes = 0;
};

class kv_transport;  // how a store reaches its shards (internal)
class kvstore;
// A store over `transport` (internal: the factories below and tests use it).
std::unique_ptr<kvstore> wrap_transport(std::unique_ptr<kv_transport> transport, const options& opts);

class kvstore {
 public:
  // Throws kv::error for an unknown type or mode, or a job that cannot be joined.
  static std::unique_ptr<kvstore> open(const options& opts);
  // `workers` stores sharing one set of in-process shards, for threads of one process
  // and tests: store r is rank r. opts.type must be "local".
  static std::vector<std::unique_ptr<kvstore>> open_local_group(const options& opts, std::uint32_t workers);

  ~kvstore();
  kvstore(const kvstore&) = delete;
  kvstore& operator=(const kvstore&) = delete;

  void init(const key& k, const const_array& value);
  void init(const std::vector<key>& keys, const std::vector<const_array>& values);

  // Several keys in one call travel as one message per shard. `priority` orders sends
  // within a store (higher first); the in-process store sends at once.
  handle push(const std::vector<key>& keys, const std::vector<const_array>& grads, int priority = 0);
  handle pull(const std::vector<key>& keys, const std::vector<array>& outs, int priority = 0);
  // Only rows `row_ids` of a key of shape (R, ...) into out of shape (row_ids.size(), ...).
  handle row_sparse_pull(const key& k, const std::vector<std::int64_t>& row_ids, const array& out, int priority = 0);
  // Blocks until the handle's operations are done (at most options.timeout, or
  // `timeout`); throws the first error among them. When the time is up it throws
  // timed_out and abandons what is still in flight: from then on the store neither reads
  // nor writes those calls' arrays (an answer that comes later is dropped; a push may
  // still have been applied), so the caller may reuse or free them at once.
  void wait(handle h);
  void wait(handle h, std::chrono::milliseconds timeout);
  void wait_all();
  void wait_all(std::chrono::milliseconds timeout);
  // Gives up after `d` and returns false when something is still in flight, which stays
  // in flight (its arrays still belong to the store); throws as wait() does otherwise.
  bool wait_for(handle h, std::chrono::milliseconds d);
  bool wait_all_for(std::chrono::milliseconds d);

  void set_optimizer(const optimizer_spec& opt);
  // Every live worker reaches the barrier (bounded by options.timeout).
  void barrier();

  // Collectives among the job's live workers, named as Horovod's (hvd.allreduce,
  // hvd.broadcast, hvd.allgather); the shards combine the workers' tensors, each shard a
  // share of the elements (Note [Collectives on the shards] in core/collective_rounds.hpp).
  // Each call blocks until every live worker has made it (at most options.timeout) and
  // gives every worker the same bits. Calls meet by name: an unnamed call is named by the
  // store's count of its unnamed calls, so every worker makes them in the same order (as
  // Horovod asks); a worker that joins a running job names its calls. A worker that leaves
  // or dies before making a call fails it everywhere with member_lost; calls that disagree
  // (op, root, element count) fail with bad_shape, and a reduction of which one worker's
  // tensor holds NaN or infinity fails everywhere with not_finite.
  enum class reduction { average, sum, max, min, product };
  // `in` reduced over the workers into `out` (the same shape; may be `in`).
  void allreduce(const const_array& in, const array& out, reduction op = reduction::average,
                 const std::string& name = {});
  // Rank `root`'s `value` into every worker's `value` (the same shape everywhere).
  void broadcast(const array& value, std::uint32_t root, const std::string& name = {});
  struct gathered {
    std::vector<float> data;             // the workers' tensors, concatenated in rank order
    std::vector<std::int64_t> shape;     // the first extent summed; the others every worker's
    std::vector<std::uint32_t> ranks;    // the workers that took part, ascending
    std::vector<std::int64_t> rows;      // each one's first extent, in the order of ranks
  };
  // Every worker's `in` (at least one dimension; all but the first the same everywhere),
  // concatenated along the first.
  gathered allgather(const const_array& in, const std::string& name = {});

  std::uint32_t rank() const;
  std::uint32_t num_workers() const;
  // The step a resumed job goes on from (--resume, or launch restarting it from its newest
  // checkpoint): the keys' rounds its checkpoint holds, so a loop that counts its steps as
  // rounds of its keys continues from there (Note [Key-value checkpoints] in
  // core/kv_checkpoint.hpp); 0 for a fresh job.
  std::int64_t resumed_step() const;
  // The step the keys of a lost shard server went back to when a server took its place
  // while this loop went on (the newest such; Note [Replacing a key-value shard] in the
  // source's core/job_shard_replacement.cpp); none while no shard was lost. Those keys
  // lost the updates since; a loop that wants an exact rollback goes back to this step.
  std::optional<std::int64_t> restored_step() const;
  std::string type() const;  // local | dist_sync | dist_async | dist_ssp
  std::string mode() const;  // sync | async | ssp
  // Updates the shards applied to `k` between the pull this worker's last push of it was
  // computed on and that push's arrival (the largest over the key's parts); 0 before any.
  std::int64_t staleness(const key& k) const;
  // Whether this store's tensors take the same-host fast path, so far.
  transfer_stats transfers() const;

  // Leaves the job: in sync, rounds stop waiting for this worker. Idempotent; every other
  // call afterwards throws kv::error "closed".
  void close();

  struct impl;

 private:
  friend std::unique_ptr<kvstore> wrap_transport(std::unique_ptr<kv_transport> transport, const options& opts);
  explicit kvstore(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::kv
