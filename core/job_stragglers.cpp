// job_core, part 5: naming stragglers. The median of each member's compute time over its
// latest steps is compared with the members' median at every step report; in ssp a member
// well above it is named to the shards, which leave it out of the staleness bound while it
// is slow.
#include <algorithm>
#include <array>
#include <cstdio>
#include <vector>

#include "core/job_core.hpp"

namespace troupe {

using namespace job_actions;

// Note [Naming stragglers]
// A straggler cannot be named by its step rate in ssp or sync: the others wait for it, so
// every member steps at its pace and every relative step rate reads 1. What waiting does
// not change is the time a member computes (busy_seconds in its step reports: forwards
// and backwards, its own slowness included, no waiting). The coordinator keeps each
// member's compute of its latest straggler_window steps and, at every step report,
// compares the median of those with the lower median of the same figure over the live
// members that have reported at least min_straggler_steps steps (the lower median, so
// that with two members the fast one is the reference). The median of the member's own
// steps, not an average: on a host with more members than cores, a step that the kernel
// preempts reads tens of times its compute (a slice of 4 ms against a step of 100 us), and
// an exponential average of 0.2 took one such step as a straggler for the next ten
// reports. Measured, ssp at 16 workers on 2 cores named and cleared stragglers some 800
// times a run that way, and its gradients at lr / staleness cost 0.2 points of accuracy
// (seeds 1-5: 88.57% against 88.76% with --straggler-factor 0); a slow member is slow at
// most of its steps, and the median sees it after half a window. From a member's second
// step on: the median of its first two is the lower, so both must be slow, and one
// preempted step names nobody, as with three. At every report, not on the watchdog's
// tick: until it is named the straggler holds everyone at its pace, so a second's delay
// cost the others a sixth of a short job's throughput, and each of its steps that naming
// waits for costs them one of its steps (8 workers, one 4x slower, bound 2: naming at its
// second step rather than its third, 5 alternating pairs of such runs trained a median
// 11,192 samples/s against 11,101). A member above straggler_factor times the median is
// named a straggler; it is no longer one once below 0.75 times that (so a member near the
// line is not named and cleared on every report). Only ssp acts on it (Note [Stragglers
// outside the bound] in core/shard_core_rules.cpp); sync has --backup-workers, and async waits
// for nobody.

namespace {

// The median of the member's latest min(steps, window) compute times.
template <std::size_t N>
double median_busy(std::array<double, N> v, std::int64_t steps) {
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(steps), N);
  std::nth_element(v.begin(), v.begin() + (n - 1) / 2, v.begin() + static_cast<std::ptrdiff_t>(n));
  return v[(n - 1) / 2];
}

}  // namespace

void job_core::note_busy(const step_report& r, job_actions_list& out) {
  member& m = members_[r.rank];
  m.recent_busy[static_cast<std::size_t>(m.busy_steps) % straggler_window] = r.busy_seconds;
  ++m.busy_steps;
  m.busy_per_step = median_busy(m.recent_busy, m.busy_steps);
  if (job_.mode != sync_mode::ssp || job_.straggler_factor <= 0.0 || phase_ != job_phase::training) return;
  std::vector<double> busy;
  for (const member& w : members_)
    if (w.live && !w.done && w.busy_steps >= min_straggler_steps) busy.push_back(w.busy_per_step);
  if (busy.size() < 2) return;
  std::nth_element(busy.begin(), busy.begin() + (busy.size() - 1) / 2, busy.end());
  const double median = busy[(busy.size() - 1) / 2];
  if (median <= 0.0) return;
  std::int32_t named = 0;
  for (std::uint32_t rank = 0; rank < members_.size(); ++rank) {
    member& w = members_[rank];
    if (!w.live || w.done || w.busy_steps < min_straggler_steps) continue;
    const double ratio = w.busy_per_step / median;
    const bool slow = w.straggler ? ratio > 0.75 * job_.straggler_factor : ratio > job_.straggler_factor;
    if (slow != w.straggler) {
      w.straggler = slow;
      char times[32];
      std::snprintf(times, sizeof times, "%.1f", ratio);
      out.push_back(name_straggler{rank, slow});
      out.push_back(note{member_name(rank) + (slow ? " is a straggler: its steps compute " : " is no longer a straggler (") +
                         times + "x the median" +
                         (slow ? "; the ssp bound leaves it out while it is slow, and its gradients apply at lr / "
                                 "staleness"
                               : "); the ssp bound counts it again once it has caught up")});
    }
    named += w.straggler;
  }
  if (m_) m_->stragglers->Set(named);
}

}  // namespace troupe
