// stage_parking: a member that waits for its job's restart in place instead of stopping
// (Note [Parked members]).
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

// Note [Parked members]
// In a job that restarts in place when it loses a shard server (Note [Restarting in
// place] in actors/coordinator_restart.cpp), a member may see the shard go before the
// coordinator does: its lane to the shard closes, or a pull or a connection fails. Were
// it to stop, its node would leave the job, and the restart would wait for a worker
// that does not come. So such a member parks instead: it stops calling its core and
// waits for the coordinator, which stops it with `restarting` (its node joins again) or
// with the job's end. The coordinator's own loss still stops it at once (its monitor),
// and so does --stall-timeout with nothing from the coordinator: the job's watchdog ends
// a job that no restart brings back within that time, so no member waits longer.
bool park(stage_pointer self, const fault& e) {
  auto& st = self->state;
  if (st.parked) return true;
  if (st.core->phase() == member_phase::joining || !waits_for_restart(st.core->place().job, e)) return false;
  st.parked = e;
  const std::int64_t wait_ms = st.core->place().job.stall_timeout_ms;
  spdlog::warn("{}: {}; waiting up to {} s for the coordinator to restart the job in place (--on-shard-loss)",
               who(self), to_string(e), wait_ms / 1000);
  self->delayed_send(self, std::chrono::milliseconds(wait_ms), park_deadline{});
  return true;
}

void on_park_deadline(stage_pointer self) {
  auto& st = self->state;
  if (!st.parked) return;
  const fault why{st.parked->code, st.parked->detail + "; the coordinator did not restart the job within --stall-timeout"};
  spdlog::error("{}: {}", who(self), to_string(why));
  self->quit(make_error(why));
}

}  // namespace troupe::stage_shell
