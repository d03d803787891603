// job_core, part 5: a key-value job (Note [Jobs of keys]): its key registry, the defines
// on the shards, barriers, elastic joins after the start, members leaving, and its end.
//
// Note [Jobs of keys]
// A key-value job's members are users' training loops (the client library, `import
// troupe`), which name their own keys, MXNet KVStore style; there is no model, dataset,
// epoch or evaluation, so the same core runs it with an empty model and these rules:
//   - a key's first init reaches the coordinator, whose registry (core/kv_layout.hpp)
//     splits it by whole rows at the big-array bound and places the parts on the
//     least-loaded shards; the core has the shards define the parts, then answers every
//     init and lookup of the key with its layout (a first init larger than one message
//     comes in chunks, assembled in order and dropped if the member leaves);
//   - members join before the start with the rank they ask for (when free), and after it
//     with a new rank, since the shards keep per-rank state: the job is elastic;
//   - a barrier is released once every live member has arrived;
//   - a member that dies is removed from every shard (sync rounds close without it) and
//     the job goes on while one member lives (with --min-workers N, while N live: fewer end
//     it with all_workers_lost, a node loss after which launch --max-restarts starts every
//     process again from the newest checkpoint), ending once every member has left; there is
//     no stall watchdog, since a user's loop decides its own pace and each of its waits
//     is bounded by its store's timeout;
//   - a lost shard ends the job with shard_lost, which every member's store reports, or
//     with --checkpoint-dir is replaced while the loops go on (Note [Replacing a key-value
//     shard] in core/job_shard_replacement.cpp).
#include <algorithm>

#include "core/job_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

using namespace job_actions;

void job_core::admit_new_member(ticket t, job_actions_list& out) {
  const auto rank = static_cast<std::uint32_t>(members_.size());
  members_.emplace_back();
  admitting_[rank] = t;
  out.push_back(assign_rank{t, rank});
  out.push_back(add_to_shards{rank, 0});
}

job_actions_list job_core::member_gone(std::uint32_t rank, bool lost, const std::string& why, time_point now) {
  job_actions_list out;
  member& m = members_[rank];
  if (!m.live || m.done) return out;
  if (lost) {
    m.live = false;
    ++workers_lost_;
    if (m_) m_->workers_lost->Increment();
    if (first_loss_.empty()) first_loss_ = member_name(rank) + ": " + why;
  } else {
    m.done = true;
  }
  count_nodes();
  drop_staged(rank);
  if (lost && admitting_.erase(rank)) return out;  // died while the shards admitted it
  out.push_back(remove_from_shards{rank});
  if (lost && rings_kv_members(job_) && phase_ == job_phase::training) {
    finish(fault{errc::stage_lost, member_name(rank) + " is gone (" + why +
                                       "); every collective's pieces pass through each worker of the ring "
                                       "(--mode allreduce), so the job stops"},
           out);
    return out;
  }
  if (lost) {
    std::uint32_t left = 0, alive = 0;  // alive: the finished too, who left of their own accord
    for (const auto& w : members_) {
      left += w.live && !w.done;
      alive += w.live;
    }
    if (phase_ == job_phase::training && alive < job_.min_workers && left > 0) {
      finish(fault{errc::all_workers_lost, member_name(rank) + " was lost (" + why + "); " + std::to_string(alive) +
                                               " left, fewer than --min-workers " +
                                               std::to_string(job_.min_workers) + ", so the job ends"},
             out);
      return out;
    }
    out.push_back(note{member_name(rank) + " was lost (" + why + "); " + std::to_string(left) + " go on"});
  }
  check_barrier(out);
  maybe_finish_keys(out, now);
  return out;
}

void job_core::maybe_finish_keys(job_actions_list& out, time_point now) {
  if (phase_ != job_phase::training) return;
  for (const auto& m : members_)
    if (m.live && !m.done) return;
  const bool someone_finished = std::any_of(members_.begin(), members_.end(), [](const member& m) { return m.done; });
  if (!someone_finished) {
    finish(fault{errc::all_workers_lost, "every worker was lost before one finished"}, out);
    return;
  }
  phase_ = job_phase::finishing;
  finishing_since_ = now;
  // Note [The last checkpoints of a key-value job]: a shard with no member left takes the
  // step at once.
  for (const auto& [step, c] : checkpoints_) out.push_back(request_checkpoint{step, {}});
  finish_keys(out, now);
}

// Note [The last checkpoints of a key-value job]
// A checkpoint's commit may be under way, or a shard's file of it on its way, when the
// last member leaves; the result waits for them, so the job's newest checkpoint is not
// lost with its end. A shard says when it begins a file (checkpoint_begun, sent before
// it answers anything the step's push released), so the coordinator knows of a file
// under way even before any file of that step is written: in every mode the result
// waits for each file begun, and in sync (where every shard closes the same rounds) for
// every shard's file of each step begun or written in part. A shard may never
// get to a step the others wrote (one replaced from an older checkpoint counts its rounds
// from there; in async and ssp the shards reach a step at their own pace): once the last
// member left, the coordinator asks every shard for each step written in part, and a shard
// with no member left takes its state, final now, as that step. One a shard never writes
// is given up on after --request-timeout; in async and ssp the result waits only for the
// files begun.
void job_core::finish_keys(job_actions_list& out, time_point now) {
  if (phase_ != job_phase::finishing || commits_pending_ > 0) return;
  if (job_.mode == sync_mode::sync && !checkpoints_.empty()) return;
  for (const auto& [step, c] : checkpoints_)
    if (!c.begun_settled()) return;
  job_result r;
  r.mode = std::string(name_of(job_.mode));
  r.workers = static_cast<std::uint32_t>(members_.size());
  r.servers = job_.servers;
  r.train_seconds = std::chrono::duration<double>(now - started_at_).count();
  r.checkpoints_written = checkpoints_written_;
  r.checkpoints_failed = checkpoints_failed_;
  r.workers_lost = workers_lost_;
  r.restarts_in_place = shards_replaced_;  // Note [Replacing a key-value shard]
  finish(std::move(r), out);
}

job_actions_list job_core::overdue_key_checkpoints(time_point now) {
  job_actions_list out;
  if (now - finishing_since_ <= std::chrono::milliseconds(job_.request_timeout_ms)) return out;
  for (const auto& [step, c] : checkpoints_)
    out.push_back(note{"checkpoint " + std::to_string(step) + " in " + job_.checkpoints.dir + " was not written by " +
                       "every shard " + std::to_string(job_.request_timeout_ms / 1000) +
                       " s (--request-timeout) after the last member left; the job ends without it"});
  checkpoints_.clear();
  commits_pending_ = 0;
  finish_keys(out, finishing_since_);
  return out;
}

// --mode allreduce with a command has no shard servers to hold keys.
fault job_core::no_keys_in_a_ring(const std::string& call) const {
  return {errc::bad_job, call + ": this job runs --mode allreduce, whose workers reduce round a ring with no shard "
                                "servers to hold keys; use allreduce, broadcast and allgather (troupe.horovod, or "
                                "troupe.torch.allreduce_gradients), or launch with --mode sync, async or ssp"};
}

job_actions_list job_core::on_init(ticket t, const kv_init& r) {
  if (phase_ != job_phase::training) return {refuse{t, {errc::not_started, "the job has not started"}}};
  if (rings_kv_members(job_)) return {refuse{t, no_keys_in_a_ring("init of key " + kv_key_display(r.name))}};
  const std::string shown = kv_key_display(r.name);
  std::int64_t numel = 1;
  for (auto d : r.dims) {
    if (d <= 0 || numel > kv_max_key_floats / d)
      return {refuse{t,
                     {errc::bad_shape, "init of key " + shown + ": shape " + dims_str(r.dims) +
                                           " needs dimensions of at least 1 and at most " +
                                           std::to_string(kv_max_key_floats) + " elements in all"}}};
    numel *= d;
  }
  const std::int64_t n = r.value.numel();
  if (r.value.empty() || r.value.type() != dtype::f32 || r.offset < 0 || r.offset > numel - n)
    return {refuse{t,
                   {errc::bad_shape,
                    "init of key " + shown + ": the value does not hold " + dims_str(r.dims) + " float32 elements"}}};
  if (!all_finite(r.value))
    return {refuse{t, {errc::not_finite, "init of key " + shown + ": the value holds NaN or infinite values"}}};
  const auto staging = std::make_pair(r.worker, r.name);
  tensor assembled;
  if (registry_->find(r.name) != nullptr) {
    staged_.erase(staging);  // another init defined it: this one's chunks are moot
  } else if (n < numel) {    // a chunk of the first init
    auto& got = staged_[staging];
    if (static_cast<std::int64_t>(got.size()) != r.offset) {
      const std::size_t expected = got.size();
      staged_.erase(staging);
      return {refuse{t,
                     {errc::malformed, "init of key " + shown + ": a chunk at element " + std::to_string(r.offset) +
                                           ", where element " + std::to_string(expected) + " was next"}}};
    }
    got.insert(got.end(), r.value.data<float>(), r.value.data<float>() + n);
    if (static_cast<std::int64_t>(got.size()) < numel) return {answer_key{t, {}}};  // send the next one
    assembled = tensor::uninitialized({numel});
    std::copy(got.begin(), got.end(), assembled.data<float>());
    staged_.erase(staging);
  }
  auto found = registry_->init(r.name, r.dims);
  if (found.error) return {refuse{t, *found.error}};
  const kv_key_layout& k = *found.layout;
  if (found.created) {
    defines_[k.id] = {r.name, {t}};
    return {define_on_shards{k.id, k, assembled.empty() ? r.value : std::move(assembled)}};
  }
  if (auto d = defines_.find(k.id); d != defines_.end()) {  // its shards are still defining it
    d->second.waiting.push_back(t);
    return {};
  }
  return {answer_key{t, k}};
}

void job_core::drop_staged(std::uint32_t rank) {
  for (auto it = staged_.lower_bound({rank, std::string()}); it != staged_.end() && it->first.first == rank;)
    it = staged_.erase(it);
}

job_actions_list job_core::on_lookup(ticket t, const kv_lookup& r) {
  if (rings_kv_members(job_)) return {refuse{t, no_keys_in_a_ring("key " + kv_key_display(r.name))}};
  const kv_key_layout* k = registry_->find(r.name);
  if (!k)
    return {
        refuse{t, {errc::no_such_key, "key " + kv_key_display(r.name) + " was never initialised; call init first"}}};
  if (auto d = defines_.find(k->id); d != defines_.end()) {
    d->second.waiting.push_back(t);
    return {};
  }
  return {answer_key{t, *k}};
}

job_actions_list job_core::defined(std::uint64_t id) {
  job_actions_list out;
  auto d = defines_.extract(id);
  if (!d) return out;
  const kv_key_layout* k = registry_->find(static_cast<std::uint32_t>(id));
  for (ticket t : d.mapped().waiting) out.push_back(answer_key{t, *k});
  return out;
}

job_actions_list job_core::define_failed(std::uint64_t id, const fault& why) {
  // A shard that cannot hold a key it was given cannot serve the job.
  job_actions_list out;
  auto d = defines_.extract(id);
  if (d)
    for (ticket t : d.mapped().waiting) out.push_back(refuse{t, why});
  finish(fault{errc::shard_lost,
               "a shard did not define key " + kv_key_display(d ? d.mapped().name : "?") + ": " + to_string(why)},
         out);
  return out;
}

job_actions_list job_core::on_set_optimizer(ticket t, const kv_set_optimizer& r) {
  if (phase_ != job_phase::training) return {refuse{t, {errc::not_started, "the job has not started"}}};
  if (rings_kv_members(job_)) return {refuse{t, no_keys_in_a_ring("set_optimizer")}};
  return {set_optimizer_on_shards{t, r}};
}

job_actions_list job_core::on_barrier(ticket t, std::uint32_t rank) {
  job_actions_list out;
  at_barrier_.insert(rank);
  barrier_tickets_.push_back(t);
  check_barrier(out);
  return out;
}

void job_core::check_barrier(job_actions_list& out) {
  if (barrier_tickets_.empty()) return;
  for (std::uint32_t r = 0; r < members_.size(); ++r)
    if (members_[r].live && !members_[r].done && !at_barrier_.count(r)) return;
  out.push_back(release{std::exchange(barrier_tickets_, {})});
  at_barrier_.clear();
}

}  // namespace troupe
