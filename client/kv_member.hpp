// kv_member: the actor through which a client process (a user's training loop) is a
// member of a key-value job. It joins the coordinator, connects to the shards the welcome
// names (or takes their handles in one process), and carries the store's calls as
// requests with the job's request timeout. It watches the coordinator and every shard:
// when one goes away every call in flight fails at once with shard_lost (CAF 0.17 would
// only time them out) and later calls fail the same way, unless the job replaces a lost
// shard (Note [A shard away] in client/kv_member_away.cpp). Large tensors to and from shards
// on other hosts take its bulk lanes (Note [Bulk lanes]). Calls are local triggers
// (Note [Type IDs and local triggers] in actors/protocol.hpp): only this process sends them.
#pragma once

#include <caf/all.hpp>
#include <caf/io/middleman_actor.hpp>

#include <functional>
#include <mutex>
#include <optional>

#include "actors/protocol.hpp"
#include "client/kv_transport.hpp"
#include "core/kv_messages.hpp"
#include "core/ring_lanes.hpp"
#include "transport/lane.hpp"
#include "transport/shard_links.hpp"

namespace troupe::kv {

// host, port: where this member's ring neighbours reach it (its published actor; empty in
// one process), in a job that rings (Note [A ring of users' loops] in
// client/kv_member_ring.cpp).
struct member_call_join {
  std::string job_id, proof;
  std::function<void(or_fault<member_assignment>)> done;
  std::string host;
  std::uint16_t port = 0;
};
struct member_call_init {
  kv_init msg;
  std::function<void(or_fault<kv_key_layout>)> done;
};
struct member_call_lookup {
  kv_lookup msg;
  std::function<void(or_fault<kv_key_layout>)> done;
};
// A push's data goes on the member's bulk lane to the shard when `lane` allows it (the
// shard is not reached through shared memory), the lane is open and the data large enough
// (Note [Bulk lanes] in transport/lane.hpp); a pull asks its answer there when its `bytes` are.
// The completion sees the answer's data in the reply either way.
// `channel`: the same-host channel whose push slot holds the push's data (its reply slot,
// for a pull); the call rings that channel's doorbell when it can (Note [Doorbells] in
// transport/doorbell.hpp), and goes as a message otherwise.
struct member_call_push {
  std::uint32_t shard = 0;
  kv_push msg;
  std::function<void(or_fault<kv_push_ack>)> done;
  bool lane = true;
  std::optional<std::size_t> channel;
};
struct member_call_pull {
  std::uint32_t shard = 0;
  kv_pull msg;
  std::function<void(or_fault<kv_pull_reply>)> done;
  std::size_t bytes = 0;  // the answer's f32 bytes
  bool lane = true;
  int asked_again = 0;    // times asked again of a shard not known to be gone (Note [A shard away])
  std::optional<std::size_t> channel;
};
struct member_call_optimizer {
  kv_set_optimizer msg;
  std::function<void(std::optional<fault>)> done;
};
struct member_call_barrier {
  std::chrono::milliseconds timeout;
  std::function<void(std::optional<fault>)> done;
};
// A piece of a collective for `shard` (Note [Collectives on the shards]); it waits for the
// other members' pieces, so for the store's timeout rather than the job's request timeout.
// A collective's piece goes on the bulk lane and asks its answer there as a push and a pull
// do: when `lane` allows it, the lane is open and the piece's (the answer's `bytes`) data
// large enough.
struct member_call_collective {
  std::uint32_t shard = 0;
  kv_collective msg;
  std::chrono::milliseconds timeout;
  std::function<void(or_fault<kv_collective_reply>)> done;
  std::size_t bytes = 0;  // the answer's f32 bytes, when known (0: not known)
  bool lane = true;
};
// One collective round the ring of a job with no shards (Note [A ring of users' loops] in
// client/kv_member_ring.cpp). `values`: this member's input (f32, contiguous); for
// reduce and broadcast also the result, for gather `out` (the sum of `counts`, one per
// rank) is. `done` gets the result, or why not, once: within `timeout`.
enum class ring_kind : std::uint8_t { reduce, broadcast, gather };
struct member_call_ring {
  ring_kind kind = ring_kind::reduce;
  std::string name;  // the same on every member for the same call
  reduce_op op = reduce_op::sum;
  std::uint32_t root = 0;
  tensor values, out;
  std::vector<std::int64_t> counts;
  std::chrono::milliseconds timeout{0};
  std::function<void(or_fault<tensor>)> done;
};
// The ring call numbered `call` was not done within its timeout.
struct member_ring_overdue {
  std::uint64_t call = 0;
};
// The loop ended a step (Note [Steps of a user's loop] in client/step_meter.hpp): a step
// report to the coordinator.
struct member_call_step {
  std::int64_t number = 0;
  double busy_seconds = 0.0;
};
struct member_call_close {
  std::function<void()> done;
};
// The member, to itself after a pause: try the connection that failed again.
struct member_call_retry {
  std::function<void()> again;
};

// The steps a job's lost shards went back to (Note [Replacing a key-value shard] in
// core/job_shard_replacement.cpp): the member's actor notes each, the store reports the
// latest (kv.restored_step). Thread-safe.
class shard_restores {
 public:
  void note(std::int64_t step) {
    std::lock_guard lock(mu_);
    latest_ = step;
  }
  std::optional<std::int64_t> latest() const {
    std::lock_guard lock(mu_);
    return latest_;
  }

 private:
  mutable std::mutex mu_;
  std::optional<std::int64_t> latest_;
};

struct member_options {
  coordinator_actor coordinator;
  // Across nodes: opens connections to shards (TLS or plain) and declares which host
  // and role each must present (Note [Certificate roles]); unset in one process.
  std::optional<caf::io::middleman_actor> connector;
  std::function<void(const std::string& host, std::uint16_t port, const char* role)> expect_peer;
  std::chrono::milliseconds connect_timeout{30000};
  // The rank to ask the coordinator for (TROUPE_WORKER_INDEX), or -1 for any
  // (worker_join::wanted_rank).
  std::int32_t wanted_rank = -1;
  // This process's end of the bulk lanes to shards on other hosts; none: tensors go in the
  // messages.
  std::shared_ptr<lane::member_end> lanes;
  // Where the steps that replaced shards went back to are noted (none: not noted).
  std::shared_ptr<shard_restores> restores;
  // Across nodes: publishes the member's actor where its ring neighbours can reach it,
  // giving the host and port it joins with (Note [A ring of users' loops] in
  // client/kv_member_ring.cpp); unset in one process.
  std::function<or_fault<std::pair<std::string, std::uint16_t>>(const caf::actor&)> publish;
  // The job's tag for the same-host fast path: in a ring of users' loops, the pieces to a
  // neighbour in another process of this host go through a ring mailbox (Note [A ring of
  // users' loops]); empty: in the messages.
  std::string fast_path_tag;
  // The store's links to the shards (transport/shard_links.hpp), wired at the join: the
  // member rings the bell blocks of their channels (Note [Doorbells]) unless `doorbells`
  // is off (launch --no-doorbells: TROUPE_DOORBELLS=0). Held here so that their memory
  // outlives the member's watch on it.
  std::shared_ptr<shard_links> links;
  bool doorbells = true;
  // Across nodes, in a ring of users' loops: this node's ends of the bulk lanes between
  // ring neighbours (Note [Ring lanes] in core/ring_lanes.cpp); unset: the pieces that no
  // mailbox carries go in the messages.
  ring_lane_ends ring_lanes;
};

caf::actor spawn_kv_member(caf::actor_system& sys, member_options opts);

}  // namespace troupe::kv

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_join)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_init)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_lookup)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_push)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_pull)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_optimizer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_barrier)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_close)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_collective)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_retry)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_call_ring)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kv::member_ring_overdue)
