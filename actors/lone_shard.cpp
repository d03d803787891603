// lone_shard: the stand-in coordinator.
#include "actors/lone_shard.hpp"

namespace troupe {

namespace {

coordinator_actor::behavior_type welcome_only(coordinator_actor::pointer, job_spec job, std::int64_t numel) {
  return {
      [=](join_atom, const shard_join&) -> caf::result<shard_welcome> {
        return shard_welcome{0, job, {key_range{0, 0, 0, numel}}};
      },
      [](join_atom, const worker_join&) -> caf::result<worker_welcome> {
        return make_error(errc::cluster_full, "this coordinator only welcomes one shard");
      },
      [](progress_atom, const step_report&) {},
      [](epoch_atom, const worker_epoch&) {},
      [](done_atom, const worker_done&) {},
      [](group_atom, const group_id&) {},
  };
}

}  // namespace

coordinator_actor spawn_welcome_only_coordinator(caf::actor_system& sys, job_spec job, std::int64_t numel) {
  return sys.spawn(welcome_only, std::move(job), numel);
}

}  // namespace troupe
