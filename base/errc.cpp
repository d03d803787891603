// Names of the error codes and faults, as they appear in logs and error messages.
#include "base/errc.hpp"

namespace troupe {

std::string to_string(errc x) {
  switch (x) {
    case errc::bad_shard: return "bad_shard";
    case errc::bad_shape: return "bad_shape";
    case errc::bad_dtype: return "bad_dtype";
    case errc::not_finite: return "not_finite";
    case errc::not_member: return "not_member";
    case errc::bad_clock: return "bad_clock";
    case errc::stale_round: return "stale_round";
    case errc::duplicate: return "duplicate";
    case errc::not_started: return "not_started";
    case errc::cluster_full: return "cluster_full";
    case errc::shard_lost: return "shard_lost";
    case errc::all_workers_lost: return "all_workers_lost";
    case errc::stalled: return "stalled";
    case errc::diverged: return "diverged";
    case errc::bad_job: return "bad_job";
    case errc::malformed: return "malformed";
    case errc::stage_lost: return "stage_lost";
    case errc::compute_failed: return "compute_failed";
    case errc::no_such_key: return "no_such_key";
    case errc::timed_out: return "timed_out";
    case errc::closed: return "closed";
    case errc::checkpoint_failed: return "checkpoint_failed";
    case errc::member_lost: return "member_lost";
    case errc::restarting: return "restarting";
  }
  return "unknown(" + std::to_string(static_cast<int>(x)) + ")";
}

std::string to_string(const fault& f) {
  return f.detail.empty() ? to_string(f.code) : to_string(f.code) + ": " + f.detail;
}

}  // namespace troupe
