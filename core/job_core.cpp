// job_core, part 1: admission, the start, and replacing a lost worker (job_watch.cpp has
// progress, failures and the watchdog; job_epochs.cpp closes epochs and the job).
#include "core/job_core.hpp"

#include <algorithm>
#include <limits>

#include "core/job_frames.hpp"
#include "core/local_groups.hpp"
#include "core/residual_checkpoint.hpp"
#include "core/ring_seats.hpp"

namespace troupe {

using namespace job_actions;

std::string_view name_of(job_phase p) {
  switch (p) {
    case job_phase::admitting: return "admitting";
    case job_phase::starting: return "starting";
    case job_phase::training: return "training";
    case job_phase::finishing: return "finishing";
    case job_phase::finished: return "finished";
  }
  return "?";
}

job_core::job_core(job_spec job, const model& m, observability obs, time_point now)
    : job_(std::move(job)), layout_(m), num_params_(m.num_params()), last_progress_(now), last_tick_(now), last_watch_(now),
      ledger_(job_) {
  if (job_.kv) {
    registry_.emplace(job_.servers, job_.big_array_bound);  // Note [Jobs of keys]
  } else {
    if (job_.servers > 0) table_ = partition_parameters(m, job_.servers, job_.big_array_bound);
    frame_bytes_ = max_frame_bytes(job_, m);
  }
  if (obs.metrics) m_ = obs.metrics->coordinator();
  // Sync gradients are never stale. Under ssp with bound s, a worker may read parameters
  // missing up to s clocks of every other worker and push up to s clocks ahead, so
  // staleness stays below (2s + 2) * workers updates. Async has no bound to export.
  if (m_ && in_lockstep(job_.mode)) m_->staleness_bound()->Set(0);
  if (m_ && job_.mode == sync_mode::ssp)
    m_->staleness_bound()->Set(static_cast<double>((2 * job_.staleness + 2) * static_cast<std::int64_t>(members(job_))));
}

std::string job_core::member_name(std::uint32_t r) const {
  if (job_.pipeline_stages == 1) return "worker " + std::to_string(r);
  return "stage " + std::to_string(r % job_.pipeline_stages) + " of replica " + std::to_string(r / job_.pipeline_stages);
}

std::uint32_t job_core::live_members() const {
  std::uint32_t n = 0;
  for (const auto& w : members_) n += w.live;
  return n;
}

fault job_core::wrong_job(const std::string& id) const {
  return {errc::bad_job, "this node was started for job '" + id + "' but the coordinator runs job '" + job_.job_id +
                             "'; check its configuration"};
}

// ---------------------------------------------------------------------------------------
// Admission and start

job_actions_list job_core::on_shard_join(ticket t, const shard_join& j, time_point now) {
  if (phase_ == job_phase::finished) return {refuse{t, {errc::cluster_full, "the job has ended"}}};
  if (j.job_id != job_.job_id) return {refuse{t, wrong_job(j.job_id)}};
  if (replaces_shards() && phase_ == job_phase::training) {  // Note [Replacing a key-value shard]
    job_actions_list out;
    admit_replacement_shard(t, j, out);
    return out;
  }
  if (shard_hosts_.size() >= job_.servers)
    return {refuse{t, {errc::cluster_full, "the job already has its " + std::to_string(job_.servers) + " shards"}}};
  const auto index = static_cast<std::uint32_t>(shard_hosts_.size());
  shard_hosts_.push_back(j.host);
  shard_ports_.push_back(j.port);
  count_nodes();
  last_progress_ = now;
  // The welcome comes before any start message can follow it (same sender, same order).
  job_actions_list out{
      welcome_shard{t, shard_welcome{index, job_, table_.ranges_of(index), resume_ ? resume_->shards : shard_resume{}}}};
  maybe_start(out);
  return out;
}

job_actions_list job_core::on_member_join(ticket t, const worker_join& j, time_point now) {
  if (phase_ == job_phase::finished) return {refuse{t, {errc::cluster_full, "the job has ended"}}};
  if (j.job_id != job_.job_id) return {refuse{t, wrong_job(j.job_id)}};
  if (at_end_)  // Note [A shard lost after training]
    return {refuse{t, {errc::cluster_full, "the job's training is over: it restarted from its end checkpoint only to "
                                           "evaluate it and end"}}};
  job_actions_list out;
  if (phase_ == job_phase::training) {
    if (rings_kv_members(job_))
      out.push_back(refuse{t, ring_is_full()});
    else if (job_.kv && replacing_)  // the new shard must admit it too (Note [Replacing a key-value shard])
      held_member_joins_.push_back(t);
    else if (job_.kv)
      admit_new_member(t, out);
    else
      rejoin(t, out, now);
    return out;
  }
  // A key-value job takes more members than it waits for (Note [Jobs of keys]); they are
  // admitted once the shards have started. A ring has its members.
  if (rings_kv_members(job_) && pending_joins_.size() >= members(job_)) return {refuse{t, ring_is_full()}};
  if (!job_.kv && (phase_ != job_phase::admitting || pending_joins_.size() >= members(job_)))
    return {refuse{t,
                   {errc::cluster_full, "the job already has its " + std::to_string(members(job_)) + " workers" +
                                            (job_.pipeline_stages > 1 ? " (replicas x pipeline stages)" : "")}}};
  const std::uint32_t rank = rank_for_join(j.wanted_rank);
  if (members_.size() <= rank) {
    member vacant;
    vacant.live = false;  // until its member joins, which happens before the job starts
    members_.resize(rank + 1, vacant);
  }
  member& info = members_[rank];
  info = member{};
  info.clock = info.clock_at_tick = start_clock_;
  info.epochs_reported = epochs_closed_;
  info.host = j.host;
  info.port = j.port;
  info.locality = j.locality;
  pending_joins_.emplace(rank, t);
  last_progress_ = now;
  out.push_back(assign_rank{t, rank});
  maybe_start(out);
  return out;
}

// Before the start a member gets the rank it asks for (a launched node's index, so that
// launch's "[worker 2]" is worker 2) when that is one of the job's and still free, and
// otherwise the lowest free one: ranks are then join order.
std::uint32_t job_core::rank_for_join(std::int32_t wanted) const {
  const auto free = [&](std::uint32_t r) { return !pending_joins_.count(r); };
  if (wanted >= 0 && static_cast<std::uint32_t>(wanted) < members(job_) && free(static_cast<std::uint32_t>(wanted)))
    return static_cast<std::uint32_t>(wanted);
  std::uint32_t r = 0;
  while (!free(r)) ++r;
  return r;
}

void job_core::maybe_start(job_actions_list& out) {
  if (phase_ != job_phase::admitting || shard_hosts_.size() < job_.servers ||
      (!at_end_ && pending_joins_.size() < members(job_)))
    return;
  phase_ = job_phase::starting;
  if (deals_samples(job_) && !at_end_) dealer_.emplace(deal_shape_of(job_), members(job_), start_clock_);
  form_local_groups(out);
  membership m;
  m.clock = start_clock_;
  if (job_.kv) {  // every member that joined so far, whatever its rank
    for (const auto& [r, t] : pending_joins_) m.workers.push_back(r);
    started_members_ = static_cast<std::uint32_t>(members_.size());
  }
  for (std::uint32_t r = 0; !job_.kv && !at_end_ && r < members(job_); ++r) {
    if (!pushes_to_shards(members_[r].group, r)) continue;
    m.workers.push_back(r);
    m.stages.push_back(r % job_.pipeline_stages);
  }
  if (shard_hosts_.empty()) {  // --servers 0: nothing to tell
    auto go = shards_started(last_progress_);
    out.insert(out.end(), go.begin(), go.end());
    return;
  }
  out.push_back(start_shards{std::move(m)});
}

// With --local-reduce, groups the members that share a node (Note [Local groups] in
// local_groups.cpp) and says so.
void job_core::form_local_groups(job_actions_list& out) {
  if (!job_.local_reduce) return;
  std::vector<std::string> localities;
  for (const auto& w : members_) localities.push_back(w.locality);
  const auto groups = local_groups(localities);
  bool any = false;
  const bool ring = job_.mode == sync_mode::allreduce;
  const bool ringed = ring_replicas(job_.workers, groups).size() >= 2;  // Note [Rings of leaders]
  for (std::uint32_t r = 0; r < groups.size(); ++r) {
    members_[r].group = groups[r];
    if (groups[r].empty() || groups[r].front() != r) continue;
    any = true;
    std::string names;
    for (std::uint32_t m : groups[r]) names += (names.empty() ? "" : ", ") + std::to_string(m);
    const std::string role = !ring    ? " leads and talks to the shards)"
                             : ringed ? " leads and takes the group's sum round the ring)"
                                      : " leads; the group's sum is the whole job's, so no ring forms)";
    out.push_back(note{"local group at " + members_[r].locality + ": workers " + names + " (worker " +
                       std::to_string(r) + role});
  }
  if (!any)
    out.push_back(note{std::string("--local-reduce: no two workers share a node (GPUs of one machine, or one process "
                                   "on the CPU), so every worker ") +
                       (job_.mode == sync_mode::allreduce ? "rings its own gradient" : "pushes and pulls on its own")});
}

job_actions_list job_core::shards_started(time_point now) {
  if (phase_ != job_phase::starting) return {};
  phase_ = job_phase::training;
  ledger_.start(now);
  last_progress_ = last_checkpoint_request_ = started_at_ = now;
  job_actions_list out;
  if (at_end_) {
    evaluate_end(out, now);
    return out;
  }
  for (const auto& [rank, t] : pending_joins_) {
    if (!members_[rank].live) continue;
    if (job_.kv && rank >= started_members_) {  // joined while the shards started: they do not know it yet
      admitting_[rank] = t;
      out.push_back(add_to_shards{rank, 0});
      continue;
    }
    out.push_back(welcome_member{t, assignment(rank, start_clock_)});
  }
  pending_joins_.clear();
  count_nodes();
  if (resume_)
    out.push_back(note{"every node has joined: training goes on from step " + std::to_string(start_clock_) +
                       " (checkpoint " + std::to_string(resume_->step) + " in " + resume_->shards.dir + ")"});
  return out;
}

// Note [Shard handles across nodes]
// In one process the welcome carries the shards' handles. Across nodes it carries only
// their addresses: a handle forwarded by the coordinator makes the worker's node route
// to the shard through the coordinator's node, and with CAF 0.17 such indirect routes
// broke TLS connections when a node left. Workers connect to each shard directly.
// Pipeline neighbours go the same way: by handle in one process, by address (each member
// publishes itself) across nodes. The shell adds the handles where no address is given.
member_assignment basic_assignment(const job_spec& job, const key_table& table, std::uint32_t rank,
                                   std::int64_t resume_clock) {
  member_assignment a;
  a.rank = rank;
  a.world = job.workers;
  a.job = job;
  a.table = table;
  a.resume_clock = resume_clock;
  if (job.mode == sync_mode::allreduce) a.ring = ring_replicas(job.workers, {});
  return a;
}

member_assignment job_core::assignment(std::uint32_t rank, std::int64_t resume_clock) const {
  member_assignment a = basic_assignment(job_, table_, rank, resume_clock);
  a.shard_hosts = shard_hosts_;
  a.shard_ports = shard_ports_;
  if (job_.kv) {  // Note [Jobs of keys]: no model to place, and as many members as have joined
    a.world = static_cast<std::uint32_t>(members_.size());
    if (const auto seat = seat_in(a.ring, rank)) {  // Note [A ring of users' loops] in client/kv_member_ring.cpp
      a.ring_prev_host = members_[seat->prev].host;
      a.ring_prev_port = members_[seat->prev].port;
      a.ring_next_host = members_[seat->next].host;
      a.ring_next_port = members_[seat->next].port;
    }
    return a;
  }
  const std::uint32_t k = job_.pipeline_stages, stage = rank % k;
  if (stage > 0) {
    a.prev_host = members_[rank - 1].host;
    a.prev_port = members_[rank - 1].port;
  }
  if (stage + 1 < k) {
    a.next_host = members_[rank + 1].host;
    a.next_port = members_[rank + 1].port;
  }
  if (job_.mode == sync_mode::allreduce) {
    if (k == 1 && job_.local_reduce) {  // local groups form with one stage only
      std::vector<std::vector<std::uint32_t>> groups;
      for (const member& m : members_) groups.push_back(m.group);
      a.ring = ring_replicas(job_.workers, groups);
    }
    if (const auto seat = seat_in(a.ring, rank / k)) {
      const member& prev = members_[seat->prev * k + stage];
      const member& next = members_[seat->next * k + stage];
      a.ring_prev_host = prev.host;
      a.ring_prev_port = prev.port;
      a.ring_next_host = next.host;
      a.ring_next_port = next.port;
    }
  }
  a.group = members_[rank].group;
  // Note [Members' checkpoints]; and Note [Residuals in checkpoints] for a member that
  // starts at the resumed clock (a replacement joining later starts from zeros).
  if (resume_ && (job_.servers == 0 || (keeps_residuals(job_) && resume_clock == resume_->clock)))
    a.resume = resume_->shards;
  return a;
}

fault job_core::ring_is_full() const {
  return {errc::cluster_full, "the job's ring already has its " + std::to_string(job_.workers) +
                                  " workers (--mode allreduce with a command takes no more, before or after the "
                                  "start)"};
}

// ---------------------------------------------------------------------------------------
// Replacement

// A member joining a running job takes the rank of a worker that died, or stands by.
void job_core::rejoin(ticket t, job_actions_list& out, time_point now) {
  if (job_.pipeline_stages > 1) {
    out.push_back(refuse{t,
                         {errc::cluster_full, "the job is running and a pipeline stage cannot be replaced in a "
                                              "running job; its replica stopped when the stage was lost"}});
    return;
  }
  if (job_.mode == sync_mode::allreduce) {
    out.push_back(refuse{t,
                         {errc::cluster_full, "the job is running in --mode allreduce, whose ring of replicas cannot "
                                              "take a new member; the job stops when one of them is lost"}});
    return;
  }
  if (job_.local_reduce) {
    out.push_back(refuse{t,
                         {errc::cluster_full, "the job is running with --local-reduce, whose local groups cannot "
                                              "take new members; a group stops as a whole when one of its workers "
                                              "is lost"}});
    return;
  }
  if (auto rank = free_rank()) {
    admit_replacement(t, *rank, out, now);
    return;
  }
  out.push_back(note{"a worker joined the running job; it stands by until a worker dies"});
  standby_.push_back(t);
}

std::optional<std::uint32_t> job_core::free_rank() const {
  for (std::uint32_t r = 0; r < members_.size(); ++r)
    if (!members_[r].live && !members_[r].done && !admitting_.count(r)) return r;
  return std::nullopt;
}

// In sync the replacement joins at a round a little ahead of the fastest worker, so every
// shard can add it before that round opens; in async/ssp it starts level with the slowest
// live worker; in both, not before the first clock whose share of its rank was not dealt
// to the others.
void job_core::admit_replacement(ticket t, std::uint32_t rank, job_actions_list& out, time_point now) {
  std::int64_t slowest = std::numeric_limits<std::int64_t>::max(), fastest = 0;
  for (const member& w : members_)
    if (w.live && !w.done) {
      slowest = std::min(slowest, w.clock);
      fastest = std::max(fastest, w.clock);
    }
  if (slowest == std::numeric_limits<std::int64_t>::max()) slowest = fastest = 0;
  std::int64_t clock = in_lockstep(job_.mode) ? fastest + 2 : slowest;
  // Note [Dealing a lost worker's samples]: not where the others train its samples.
  if (dealer_) clock = dealer_->replace(rank, clock);
  member& w = members_[rank];
  w = member{};
  w.clock = clock;
  w.epochs_reported = static_cast<std::int32_t>(clock / std::max<std::int64_t>(1, steps_per_epoch(job_)));
  last_progress_ = now;
  admitting_[rank] = t;
  out.push_back(assign_rank{t, rank});
  out.push_back(note{"worker " + std::to_string(rank) + " rejoined at clock " + std::to_string(clock)});
  if (shard_hosts_.empty()) {
    auto welcome = member_added(rank, now);
    out.insert(out.end(), welcome.begin(), welcome.end());
    return;
  }
  out.push_back(add_to_shards{rank, clock});
}

job_actions_list job_core::member_added(std::uint32_t rank, time_point) {
  auto it = admitting_.find(rank);
  if (it == admitting_.end() || phase_ == job_phase::finished) return {};
  const ticket t = it->second;
  admitting_.erase(it);
  job_actions_list out{welcome_member{t, assignment(rank, members_[rank].clock)}};
  if (job_.kv) out.push_back(note{member_name(rank) + " joined the running job"});
  return out;
}

void job_core::on_standby_down(ticket t) {
  std::erase(standby_, t);
  std::erase(held_member_joins_, t);
}

}  // namespace troupe
