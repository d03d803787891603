// shard_state: what one shard server actor keeps, and what its two source files share:
// shard_server.cpp is the shell of a training job's shard_core (join, admission, pushes,
// pulls, snapshots, the fast path) and checks who sent each message; shard_kv.cpp is the
// key-value side, the shell of kv_shard_core, called once the sender is checked. Private
// to those two files.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "actors/protocol.hpp"
#include "actors/shard_server.hpp"
#include "core/kv_shard_core.hpp"
#include "core/pull_views.hpp"
#include "core/shard_core.hpp"
#include "core/shared_slots.hpp"

namespace troupe::shard_shell {

using wall = std::chrono::system_clock;

struct held_pull {
  caf::typed_response_promise<params_reply> promise;
  wall::time_point since;
  std::uint32_t member = 0;
  shared_tensor reply_to;
  bool full = false;  // Note [2-bit pulls]
  std::int64_t piece_offset = 0, piece_numel = 0;  // a piece of the slice; 0: all of it
};

// A key-value job's pull waiting for the parts its shard core held.
struct held_kv_pull {
  caf::typed_response_promise<kv_pull_reply> promise;
  kv_pull request;
  std::size_t waiting = 0;
};

struct shard_state {
  std::unique_ptr<shard_core> core;
  std::unique_ptr<kv_shard_core> kv;  // instead of core in a key-value job
  std::uint32_t index = 0;
  std::unordered_map<shard_core::token, held_pull> held;
  shard_core::token next_token = 1;
  observability obs;
  std::optional<monitoring::shard_metrics> m;
  std::uint32_t track = 0;
  std::int64_t updates_seen = 0;
  std::vector<member_identity> members;  // by rank: the only actor that may push and pull as it
  std::optional<shm::worker_channels> channels;  // the same-host fast path; none when it is off
  grad_codec compression, pull_precision;         // the job's, for pushes and for answers over the network
  std::optional<pull_views> views;                // --pull-precision 2bit: what each member holds
  std::map<kv_shard_core::token, std::uint64_t> kv_tokens;  // a held part -> its pull
  std::map<std::uint64_t, held_kv_pull> kv_held;
  std::uint64_t next_kv_pull = 1;
  static inline const char* name = "troupe.shard_server";
};

using shard_pointer = local_shard_actor::stateful_pointer<shard_state>;

// Answers both sides give (shard_server.cpp).
caf::error not_started(shard_pointer self);
caf::error wrong_shard(shard_pointer self, std::uint32_t asked);

// The key-value side (shard_kv.cpp). Each handler runs after the shell checked that the
// coordinator (define, optimizer) or the member the message names (push, pull) sent it.
void init_kv_from_welcome(shard_pointer self, const shard_welcome& w);
// Answers the pulls whose last held part the core released; fails those it dropped.
void settle_kv(shard_pointer self);
caf::result<caf::ok_atom> kv_define_parts(shard_pointer self, const kv_define& d);
caf::result<caf::ok_atom> kv_set_optimizer_on(shard_pointer self, const kv_set_optimizer& o);
caf::result<kv_push_ack> kv_push_on(shard_pointer self, kv_push& p);
caf::result<kv_pull_reply> kv_pull_on(shard_pointer self, kv_pull& r);

}  // namespace troupe::shard_shell
