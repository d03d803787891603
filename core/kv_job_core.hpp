// The coordinator's logic for a key-value job (the client library's), free of CAF: it
// admits shards and members (users' training loops), starts the job once the expected
// members have joined and admits later ones into the running job (elastic), keeps the
// key registry (the first init of a key defines it on its shards, its value assembled
// from chunks when it is larger than one message; every other init and lookup waits
// until that is done), fans the shards' optimizer out, runs barriers over
// the live members, and ends the job when every member has left. The kv_coordinator
// actor (actors/kv_coordinator.cpp) is its shell, as actors/coordinator.cpp is
// job_core's.
//
// Failure policy, as in training jobs: a member that dies is removed from every shard
// (sync rounds close without it) and the job goes on while one member lives; a dead
// shard ends the job with shard_lost, which every member's store reports. There is no
// stall watchdog: a user's loop decides its own pace, and each of its waits is bounded by
// its store's timeout.
//
// Phases: admitting -> starting (the shards are told the members) -> running -> finished.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/errc.hpp"
#include "core/job_core.hpp"
#include "core/kv_layout.hpp"
#include "core/kv_messages.hpp"
#include "core/messages.hpp"

namespace troupe {

namespace kv_job_actions {
using job_actions::finish;
using job_actions::note;
using job_actions::refuse;
using job_actions::remove_from_shards;
using job_actions::start_shards;
using job_actions::welcome_member;
using job_actions::welcome_shard;
// The member that joined with ticket t has this rank (its handle is the rank's).
using job_actions::assign_rank;
// Every shard: this member joins the running job; once all acknowledged, member_added(rank).
struct admit_to_shards { std::uint32_t rank; };
// The shards named in `parts`: define them with these values (rows of `value` by the
// parts' row ranges); once all acknowledged, defined(id), or define_failed(id, why).
struct define_on_shards { std::uint64_t id; kv_key_layout layout; tensor value; };
// Answer the init or lookup with ticket t.
struct answer_key { ticket t; kv_key_layout layout; };
// Every shard: this optimizer; once all acknowledged, answer ok to t.
struct set_optimizer_on_shards { ticket t; kv_set_optimizer opt; };
// Answer these barrier tickets with ok.
struct release { std::vector<ticket> tickets; };
}  // namespace kv_job_actions

using kv_job_action =
    std::variant<kv_job_actions::welcome_shard, kv_job_actions::welcome_member, kv_job_actions::refuse,
                 kv_job_actions::assign_rank, kv_job_actions::start_shards, kv_job_actions::admit_to_shards,
                 kv_job_actions::remove_from_shards, kv_job_actions::define_on_shards, kv_job_actions::answer_key,
                 kv_job_actions::set_optimizer_on_shards, kv_job_actions::release, kv_job_actions::note,
                 kv_job_actions::finish>;
using kv_job_actions_list = std::vector<kv_job_action>;

class kv_job_core {
 public:
  using time_point = job_clock::time_point;
  enum class phase : std::uint8_t { admitting, starting, running, finished };

  // job.kv must be set; job.workers members are awaited before the start.
  kv_job_core(job_spec job, time_point now);

  kv_job_actions_list on_shard_join(ticket t, const shard_join& j);
  kv_job_actions_list on_member_join(ticket t, const worker_join& j);
  kv_job_actions_list shards_started(time_point now);
  kv_job_actions_list member_added(std::uint32_t rank);

  // The sender's rank is checked by the shell (Note [Members are identities]).
  kv_job_actions_list on_init(ticket t, const kv_init& r);
  kv_job_actions_list on_lookup(ticket t, const kv_lookup& r);
  kv_job_actions_list defined(std::uint64_t id);
  kv_job_actions_list define_failed(std::uint64_t id, const fault& why);
  kv_job_actions_list on_set_optimizer(ticket t, const kv_set_optimizer& r);
  kv_job_actions_list on_barrier(ticket t, std::uint32_t rank);
  kv_job_actions_list on_done(std::uint32_t rank, time_point now);

  kv_job_actions_list on_member_down(std::uint32_t rank, const std::string& why, time_point now);
  kv_job_actions_list on_shard_down(std::uint32_t shard, const std::string& why);
  kv_job_actions_list fail(fault f);

  phase current_phase() const { return phase_; }
  const job_spec& job() const { return job_; }
  std::uint32_t live_members() const;
  const kv_registry& registry() const { return registry_; }

 private:
  struct member {
    bool joined = false;  // false: a rank held free before the start (a lower one was wanted)
    bool live = false, done = false;
  };
  struct pending_define {
    std::string name;
    std::vector<ticket> waiting;  // inits and lookups answered once the shards hold the key
  };

  member_assignment assignment(std::uint32_t rank) const;
  // The rank a join gets: before the start the one it wants, when that is below the
  // job's worker count and free, else the lowest free one; after it, the next new rank
  // (ranks are never reused: the shards keep per-rank state).
  std::uint32_t rank_for(std::int32_t wanted) const;
  void maybe_start(kv_job_actions_list& out);
  void check_barrier(kv_job_actions_list& out);
  void drop_staged(std::uint32_t rank);
  void maybe_finish(kv_job_actions_list& out, time_point now);
  void finish(std::variant<job_result, fault> outcome, kv_job_actions_list& out);

  job_spec job_;
  phase phase_ = phase::admitting;
  std::vector<std::string> shard_hosts_;
  std::vector<std::uint16_t> shard_ports_;
  std::vector<member> members_;        // by rank
  std::map<std::uint32_t, ticket> pending_joins_;  // by rank, until the start
  std::uint32_t started_members_ = 0;              // ranks below this are in start_shards
  std::map<std::uint32_t, ticket> admitting_;  // rank -> its join, while the shards admit it
  kv_registry registry_;
  std::map<std::uint64_t, pending_define> defines_;  // by key id
  // A first init sent in chunks (kv_init): the elements received so far, by (rank, key);
  // they grow only with what a member sent, and go when it leaves or the key exists.
  std::map<std::pair<std::uint32_t, std::string>, std::vector<float>> staged_;
  std::set<std::uint32_t> at_barrier_;
  std::vector<ticket> barrier_tickets_;
  time_point started_at_;
  std::int64_t members_lost_ = 0;
};

}  // namespace troupe
