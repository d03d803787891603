// kv_job_core: admission, the key registry's defines, barriers and the end of a key-value job.
#include "core/kv_job_core.hpp"

#include <algorithm>

#include "base/check.hpp"
#include "tensor/ops.hpp"

namespace troupe {

using namespace kv_job_actions;

kv_job_core::kv_job_core(job_spec job, time_point now)
    : job_(std::move(job)), registry_(job_.servers, job_.big_array_bound), started_at_(now) {
  TROUPE_CHECK(job_.kv, "kv_job_core runs key-value jobs");
}

std::uint32_t kv_job_core::live_members() const {
  return static_cast<std::uint32_t>(
      std::count_if(members_.begin(), members_.end(), [](const member& m) { return m.live && !m.done; }));
}

member_assignment kv_job_core::assignment(std::uint32_t rank) const {
  member_assignment a;
  a.rank = rank;
  a.world = static_cast<std::uint32_t>(members_.size());
  a.job = job_;
  a.shard_hosts = shard_hosts_;
  a.shard_ports = shard_ports_;
  return a;
}

kv_job_actions_list kv_job_core::on_shard_join(ticket t, const shard_join& j) {
  if (phase_ == phase::finished) return {refuse{t, {errc::cluster_full, "the job has ended"}}};
  if (j.job_id != job_.job_id) return {refuse{t, {errc::bad_job, "this coordinator runs job " + job_.job_id}}};
  if (shard_hosts_.size() >= job_.servers)
    return {refuse{t, {errc::cluster_full, "the job already has its " + std::to_string(job_.servers) + " shards"}}};
  const auto index = static_cast<std::uint32_t>(shard_hosts_.size());
  shard_hosts_.push_back(j.host);
  shard_ports_.push_back(j.port);
  kv_job_actions_list out{welcome_shard{t, shard_welcome{index, job_, {}, {}}}};
  maybe_start(out);
  return out;
}

kv_job_actions_list kv_job_core::on_member_join(ticket t, const worker_join& j) {
  if (phase_ == phase::finished) return {refuse{t, {errc::cluster_full, "the job has ended"}}};
  if (j.job_id != job_.job_id) return {refuse{t, {errc::bad_job, "this coordinator runs job " + job_.job_id}}};
  const std::uint32_t rank = rank_for(j.wanted_rank);
  if (rank >= members_.size()) members_.resize(rank + 1);
  members_[rank] = member{true, true, false};
  kv_job_actions_list out{assign_rank{t, rank}};
  if (phase_ == phase::running) {  // elastic: a new member joins the running job
    admitting_[rank] = t;
    out.push_back(admit_to_shards{rank});
    return out;
  }
  pending_joins_[rank] = t;
  maybe_start(out);
  return out;
}

std::uint32_t kv_job_core::rank_for(std::int32_t wanted) const {
  const auto size = static_cast<std::uint32_t>(members_.size());
  if (phase_ != phase::admitting) return size;
  if (wanted >= 0 && static_cast<std::uint32_t>(wanted) < job_.workers) {
    const auto w = static_cast<std::uint32_t>(wanted);
    if (w >= size || !members_[w].joined) return w;
  }
  for (std::uint32_t r = 0; r < size; ++r)
    if (!members_[r].joined) return r;
  return size;
}

void kv_job_core::maybe_start(kv_job_actions_list& out) {
  if (phase_ != phase::admitting || shard_hosts_.size() < job_.servers || pending_joins_.size() < job_.workers) return;
  phase_ = phase::starting;
  membership m;
  for (std::uint32_t r = 0; r < members_.size(); ++r)
    if (members_[r].joined) m.workers.push_back(r);
  started_members_ = static_cast<std::uint32_t>(members_.size());
  out.push_back(start_shards{m});
}

kv_job_actions_list kv_job_core::shards_started(time_point now) {
  kv_job_actions_list out;
  if (phase_ != phase::starting) return out;
  phase_ = phase::running;
  started_at_ = now;
  for (const auto& [r, t] : pending_joins_) {
    if (!members_[r].live) continue;
    if (r < started_members_) {
      out.push_back(welcome_member{t, assignment(r)});
    } else {  // joined while the shards started: they do not know it yet
      admitting_[r] = t;
      out.push_back(admit_to_shards{r});
    }
  }
  pending_joins_.clear();
  return out;
}

kv_job_actions_list kv_job_core::member_added(std::uint32_t rank) {
  kv_job_actions_list out;
  auto it = admitting_.find(rank);
  if (it == admitting_.end()) return out;
  out.push_back(welcome_member{it->second, assignment(rank)});
  out.push_back(note{"worker " + std::to_string(rank) + " joined the running job"});
  admitting_.erase(it);
  return out;
}

kv_job_actions_list kv_job_core::on_init(ticket t, const kv_init& r) {
  if (phase_ != phase::running) return {refuse{t, {errc::not_started, "the job has not started"}}};
  const std::string shown = kv_key_display(r.name);
  std::int64_t numel = 1;
  for (auto d : r.dims) {
    if (d <= 0 || numel > kv_max_key_floats / d)
      return {refuse{t, {errc::bad_shape, "init of key " + shown + ": shape " + dims_str(r.dims) +
                                              " needs dimensions of at least 1 and at most " +
                                              std::to_string(kv_max_key_floats) + " elements in all"}}};
    numel *= d;
  }
  const std::int64_t n = r.value.numel();
  if (r.value.empty() || r.value.type() != dtype::f32 || r.offset < 0 || r.offset > numel - n)
    return {refuse{t, {errc::bad_shape, "init of key " + shown + ": the value does not hold " + dims_str(r.dims) +
                                            " float32 elements"}}};
  if (!all_finite(r.value))
    return {refuse{t, {errc::not_finite, "init of key " + shown + ": the value holds NaN or infinite values"}}};
  const auto staging = std::make_pair(r.worker, r.name);
  tensor assembled;
  if (registry_.find(r.name) != nullptr) {
    staged_.erase(staging);  // another init defined it: this one's chunks are moot
  } else if (n < numel) {    // a chunk of the first init
    auto& got = staged_[staging];
    if (static_cast<std::int64_t>(got.size()) != r.offset) {
      const std::size_t expected = got.size();
      staged_.erase(staging);
      return {refuse{t, {errc::malformed, "init of key " + shown + ": a chunk at element " + std::to_string(r.offset) +
                                              ", where element " + std::to_string(expected) + " was next"}}};
    }
    got.insert(got.end(), r.value.data<float>(), r.value.data<float>() + n);
    if (static_cast<std::int64_t>(got.size()) < numel) return {answer_key{t, {}}};  // send the next one
    assembled = tensor::uninitialized({numel});
    std::copy(got.begin(), got.end(), assembled.data<float>());
    staged_.erase(staging);
  }
  auto found = registry_.init(r.name, r.dims);
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

void kv_job_core::drop_staged(std::uint32_t rank) {
  for (auto it = staged_.lower_bound({rank, std::string()}); it != staged_.end() && it->first.first == rank;)
    it = staged_.erase(it);
}

kv_job_actions_list kv_job_core::on_lookup(ticket t, const kv_lookup& r) {
  const kv_key_layout* k = registry_.find(r.name);
  if (!k)
    return {refuse{t, {errc::no_such_key, "key " + kv_key_display(r.name) + " was never initialised; call init first"}}};
  if (auto d = defines_.find(k->id); d != defines_.end()) {
    d->second.waiting.push_back(t);
    return {};
  }
  return {answer_key{t, *k}};
}

kv_job_actions_list kv_job_core::defined(std::uint64_t id) {
  kv_job_actions_list out;
  auto d = defines_.extract(id);
  if (!d) return out;
  const kv_key_layout* k = registry_.find(static_cast<std::uint32_t>(id));
  for (ticket t : d.mapped().waiting) out.push_back(answer_key{t, *k});
  return out;
}

kv_job_actions_list kv_job_core::define_failed(std::uint64_t id, const fault& why) {
  // A shard that cannot hold a key it was given cannot serve the job.
  kv_job_actions_list out;
  auto d = defines_.extract(id);
  if (d)
    for (ticket t : d.mapped().waiting) out.push_back(refuse{t, why});
  finish(fault{errc::shard_lost, "a shard did not define key " + kv_key_display(d ? d.mapped().name : "?") + ": " +
                                     to_string(why)},
         out);
  return out;
}

kv_job_actions_list kv_job_core::on_set_optimizer(ticket t, const kv_set_optimizer& r) {
  if (phase_ != phase::running) return {refuse{t, {errc::not_started, "the job has not started"}}};
  return {set_optimizer_on_shards{t, r}};
}

kv_job_actions_list kv_job_core::on_barrier(ticket t, std::uint32_t rank) {
  kv_job_actions_list out;
  at_barrier_.insert(rank);
  barrier_tickets_.push_back(t);
  check_barrier(out);
  return out;
}

void kv_job_core::check_barrier(kv_job_actions_list& out) {
  if (barrier_tickets_.empty()) return;
  for (std::uint32_t r = 0; r < members_.size(); ++r)
    if (members_[r].live && !members_[r].done && !at_barrier_.count(r)) return;
  out.push_back(release{std::exchange(barrier_tickets_, {})});
  at_barrier_.clear();
}

kv_job_actions_list kv_job_core::on_done(std::uint32_t rank, time_point now) {
  kv_job_actions_list out;
  if (rank >= members_.size() || members_[rank].done || !members_[rank].live) return out;
  members_[rank].done = true;
  drop_staged(rank);
  out.push_back(remove_from_shards{rank});
  check_barrier(out);
  maybe_finish(out, now);
  return out;
}

kv_job_actions_list kv_job_core::on_member_down(std::uint32_t rank, const std::string& why, time_point now) {
  kv_job_actions_list out;
  if (rank >= members_.size() || !members_[rank].live || members_[rank].done) return out;
  members_[rank].live = false;
  ++members_lost_;
  drop_staged(rank);
  if (admitting_.erase(rank)) return out;  // died while the shards admitted it
  out.push_back(remove_from_shards{rank});
  out.push_back(note{"worker " + std::to_string(rank) + " was lost (" + why + "); " + std::to_string(live_members()) +
                     " go on"});
  check_barrier(out);
  maybe_finish(out, now);
  return out;
}

kv_job_actions_list kv_job_core::on_shard_down(std::uint32_t shard, const std::string& why) {
  kv_job_actions_list out;
  finish(fault{errc::shard_lost, "shard " + std::to_string(shard) + " was lost (" + why +
                                     "); its parameters are gone, so the job cannot go on"},
         out);
  return out;
}

kv_job_actions_list kv_job_core::fail(fault f) {
  kv_job_actions_list out;
  finish(std::move(f), out);
  return out;
}

void kv_job_core::maybe_finish(kv_job_actions_list& out, time_point now) {
  if (phase_ != phase::running || live_members() > 0) return;
  const bool someone_finished =
      std::any_of(members_.begin(), members_.end(), [](const member& m) { return m.done; });
  if (!someone_finished) {
    finish(fault{errc::all_workers_lost, "every worker was lost before one finished"}, out);
    return;
  }
  job_result r;
  r.mode = std::string(name_of(job_.mode));
  r.workers = static_cast<std::uint32_t>(members_.size());
  r.servers = job_.servers;
  r.train_seconds = std::chrono::duration<double>(now - started_at_).count();
  r.workers_lost = members_lost_;
  finish(std::move(r), out);
}

void kv_job_core::finish(std::variant<job_result, fault> outcome, kv_job_actions_list& out) {
  if (phase_ == phase::finished) return;
  phase_ = phase::finished;
  for (const auto& [r, t] : pending_joins_)
    out.push_back(refuse{t, {errc::cluster_full, "the job ended before it started"}});
  pending_joins_.clear();
  out.push_back(job_actions::finish{std::move(outcome)});
}

}  // namespace troupe
