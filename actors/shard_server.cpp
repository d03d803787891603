// shard_server: the CAF side of a shard (join, promises, logging); the rules are in shard_core.
#include "actors/shard_server.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <map>
#include <optional>
#include <unordered_map>

#include "base/compute_fault.hpp"
#include "core/kv_shard_core.hpp"
#include "core/shard_core.hpp"
#include "core/shared_slots.hpp"
#include "monitoring/refusals.hpp"

namespace troupe {

namespace {

using wall = std::chrono::system_clock;

struct held_pull {
  caf::typed_response_promise<params_reply> promise;
  wall::time_point since;
  std::uint32_t member = 0;
  shared_tensor reply_to;
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
  std::map<kv_shard_core::token, std::uint64_t> kv_tokens;  // a held part -> its pull
  std::map<std::uint64_t, held_kv_pull> kv_held;
  std::uint64_t next_kv_pull = 1;
  static inline const char* name = "troupe.shard_server";
};

using shard_pointer = local_shard_actor::stateful_pointer<shard_state>;

params_reply snapshot(shard_pointer self) {
  const auto& core = *self->state.core;
  return {self->state.index, core.version(), core.params(), {}};
}

// A pull answered with the member's slice, in the slot it offered when the fast path can
// take it (Note [Same-host fast path]), in the message otherwise: counts the bytes.
params_reply answer(shard_pointer self, std::uint32_t member, const shared_tensor& reply_to) {
  auto& st = self->state;
  const auto& core = *st.core;
  params_reply r{st.index, core.version_for(member), tensor(), {}};
  const std::int64_t numel = core.slice_numel(member);
  if (st.channels && !reply_to.empty()) {
    std::string refused;
    auto pack = [&](tensor_view out) { core.pack_slice_into(member, core.params(), out); };
    if (auto where = st.channels->answer_with(member, reply_to, {numel}, pack, refused)) {
      if (st.m) st.m->bytes_sent->Increment(static_cast<double>(numel * 4));
      r.shared = std::move(*where);
      return r;
    }
    if (!refused.empty()) spdlog::info("shard {}: answers worker {} over the network: {}", st.index, member, refused);
  }
  r.params = core.pack_slice(member, core.params());
  if (st.pull_precision.kind != codec_kind::none) r.params = encode(st.pull_precision, r.params);
  if (st.m) st.m->bytes_sent->Increment(static_cast<double>(r.params.nbytes()));
  return r;
}

// Brings the gauges and counters in line with the core after a message.
void observe(shard_pointer self) {
  auto& st = self->state;
  if (!st.m) return;
  const auto& c = st.core->counters();
  if (c.updates > st.updates_seen) st.m->updates->Increment(static_cast<double>(c.updates - st.updates_seen));
  st.updates_seen = c.updates;
  st.m->version->Set(static_cast<double>(st.core->version()));
  st.m->pulls_held->Set(static_cast<double>(st.core->held()));
  st.m->mailbox->Set(static_cast<double>(self->mailbox().size()));
}

// Answers the pulls the core released, and fails the ones it dropped.
void settle_held(shard_pointer self) {
  auto& st = self->state;
  const auto now = wall::now();
  for (auto t : st.core->take_released()) {
    auto it = st.held.find(t);
    if (it == st.held.end()) continue;
    it->second.promise.deliver(answer(self, it->second.member, it->second.reply_to));
    if (st.m) st.m->hold_seconds->Observe(std::chrono::duration<double>(now - it->second.since).count());
    if (st.obs.trace) st.obs.trace->async_span(st.track, "held pull", t, it->second.since, now);
    st.held.erase(it);
  }
  for (auto t : st.core->take_dropped()) {
    auto it = st.held.find(t);
    if (it == st.held.end()) continue;
    it->second.promise.deliver(make_error(errc::not_member, "the worker left the job"));
    st.held.erase(it);
  }
}

caf::error not_started(shard_pointer self) {
  return make_error(errc::not_started, "shard " + std::to_string(self->state.index) + " has not joined its job yet");
}

caf::error wrong_shard(shard_pointer self, std::uint32_t asked) {
  return make_error(errc::bad_shard, "message for shard " + std::to_string(asked) + " reached shard " +
                                         std::to_string(self->state.index));
}

// Note [Members are identities]: what a stranger hears back. It names nothing of the job.
caf::error refused() { return make_error(errc::not_member, "refused"); }

// Counts and (once per peer) logs a message refused for who sent it.
void note_refused(shard_pointer self, monitoring::refusal why, const char* what) {
  const std::string peer = caf::to_string(self->current_sender());
  if (monitoring::count_refusal(why, peer))
    spdlog::warn("shard {}: refused {} from {}: {}", self->state.index, what, peer, monitoring::name_of(why));
}

bool from_coordinator(shard_pointer self, const coordinator_actor& coordinator, const char* what) {
  if (self->current_sender() && self->current_sender()->address() == coordinator.address()) return true;
  note_refused(self, monitoring::refusal::not_the_coordinator, what);
  return false;
}

bool from_member(shard_pointer self, std::uint32_t rank, const char* what) {
  const auto& m = self->state.members;
  if (rank < m.size() && sent_by(self->current_sender(), m[rank])) return true;
  note_refused(self, monitoring::refusal::not_a_member, what);
  return false;
}

void record_member(shard_pointer self, std::uint32_t rank, member_identity who) {
  auto& m = self->state.members;
  if (m.size() <= rank) m.resize(rank + 1);
  m[rank] = std::move(who);
}

void init_kv_from_welcome(shard_pointer self, shard_welcome& w) {
  kv_shard_config cfg;
  cfg.index = w.index;
  cfg.mode = w.job.mode;
  cfg.staleness = w.job.staleness;
  cfg.staleness_lr = w.job.staleness_lr;
  self->state.index = w.index;
  self->state.kv = std::make_unique<kv_shard_core>(cfg);
  if (self->state.obs.metrics) self->state.m = self->state.obs.metrics->shard(w.index);
}

void init_from_welcome(shard_pointer self, shard_welcome& w) {
  if (w.job.kv) return init_kv_from_welcome(self, w);
  auto core = shard_for(w);
  if (!core) {
    spdlog::error("shard: cannot build the job's model: {}", core.error().message);
    self->quit(make_error(errc::bad_job, core.error().message));
    return;
  }
  self->state.index = w.index;
  self->state.core = std::move(*core);
  self->state.compression = w.job.compression;
  self->state.pull_precision = w.job.pull_precision;
  if (self->state.obs.metrics) {
    self->state.m = self->state.obs.metrics->shard(w.index);
    // Every reason a shard can refuse exists from the start, at zero.
    for (errc e : {errc::bad_shard, errc::bad_shape, errc::bad_dtype, errc::not_finite, errc::not_member, errc::bad_clock,
                   errc::stale_round, errc::duplicate, errc::not_started, errc::malformed})
      self->state.m->rejected(to_string(e));
  }
  if (self->state.obs.trace) self->state.track = self->state.obs.trace->track("shard " + std::to_string(w.index));
}

caf::error not_kv(shard_pointer self) {
  return self->state.core ? make_error(errc::bad_job, "a key-value message reached a shard of a training job")
                          : not_started(self);
}

// The reply to a key-value pull whose parts are all answerable now.
kv_pull_reply kv_answer(shard_pointer self, const kv_pull& r) {
  const kv_shard_core& kv = *self->state.kv;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < r.parts.size(); ++i)
    total += r.rows[i].empty() ? kv.value(r.parts[i]).numel()
                               : static_cast<std::int64_t>(r.rows[i].size()) * r.row_numel[i];
  kv_pull_reply out{self->state.index, {}, tensor::uninitialized({total})};
  std::int64_t pos = 0;
  for (std::size_t i = 0; i < r.parts.size(); ++i) {
    const const_tensor_view v = kv.value(r.parts[i]);
    const std::int64_t n = r.rows[i].empty() ? v.numel() : static_cast<std::int64_t>(r.rows[i].size()) * r.row_numel[i];
    if (r.rows[i].empty())
      copy(out.data.view().flat(pos, n), v);
    else
      kv.gather_rows(r.parts[i], r.rows[i], r.row_numel[i], out.data.view().flat(pos, n));
    out.versions.push_back(kv.version(r.parts[i]));
    pos += n;
  }
  if (self->state.m) self->state.m->bytes_sent->Increment(static_cast<double>(out.data.nbytes()));
  return out;
}

// Answers the key-value pulls whose last held part the core released; fails those it dropped.
void settle_kv(shard_pointer self) {
  auto& st = self->state;
  auto finish_token = [&](kv_shard_core::token t) -> held_kv_pull* {
    auto tok = st.kv_tokens.find(t);
    if (tok == st.kv_tokens.end()) return nullptr;
    auto it = st.kv_held.find(tok->second);
    st.kv_tokens.erase(tok);
    return it == st.kv_held.end() ? nullptr : &it->second;
  };
  for (auto t : st.kv->take_released()) {
    const auto id = st.kv_tokens.count(t) ? st.kv_tokens.at(t) : 0;
    held_kv_pull* h = finish_token(t);
    if (h && --h->waiting == 0) {
      h->promise.deliver(kv_answer(self, h->request));
      st.kv_held.erase(id);
    }
  }
  for (auto t : st.kv->take_dropped()) {
    const auto id = st.kv_tokens.count(t) ? st.kv_tokens.at(t) : 0;
    if (held_kv_pull* h = finish_token(t)) {
      h->promise.deliver(make_error(errc::not_member, "the worker left the job"));
      st.kv_held.erase(id);
    }
  }
}

// Checks a key-value push or pull's parts against what this shard holds before any is used.
std::optional<fault> check_kv_parts(const kv_shard_core& kv, const std::vector<kv_part_id>& parts) {
  for (auto p : parts)
    if (!kv.defined(p))
      return fault{errc::bad_shard, "part " + std::to_string(p & 0xFFFF) + " of key id " + std::to_string(p >> 16) +
                                        " is not on this shard"};
  return std::nullopt;
}

local_shard_actor::behavior_type shard_server(shard_pointer self, coordinator_actor coordinator, std::string job_id,
                                        std::chrono::milliseconds join_timeout, observability obs,
                                     std::string fast_path_tag) {
  self->state.obs = std::move(obs);
  if (!fast_path_tag.empty()) self->state.channels.emplace(std::move(fast_path_tag));
  self->monitor(coordinator);
  self->set_down_handler([=](caf::down_msg& dm) {
    if (dm.source != coordinator.address()) return;
    spdlog::error("shard {}: the coordinator went away ({}); stopping", self->state.index, caf::to_string(dm.reason));
    self->quit(dm.reason);
  });
  return {
      // Pushes and pulls before the welcome are refused as not_started.
      [=](const join_trigger& where) {
        self->request(coordinator, join_timeout, join_atom::value, shard_join{job_id, where.host, where.port, where.proof})
            .then([=](shard_welcome& w) { init_from_welcome(self, w); },
                  [=](caf::error& e) {
                    spdlog::error("shard: the coordinator refused or did not answer the join: {}{}", describe(e),
                                  troupe_code(e) == errc::not_member
                                      ? " (does this node hold the job's secret? pass --secret-file)"
                                      : "");
                    self->quit(e);
                  });
      },
      [=](join_atom, shard_admit& a) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "an admission")) return refused();
        if (self->state.kv) {
          record_member(self, a.joined.rank, std::move(a.identity));
          self->state.kv->member_joined(a.joined.rank);
          settle_kv(self);
          return caf::ok_atom::value;
        }
        if (!self->state.core) return not_started(self);
        record_member(self, a.joined.rank, std::move(a.identity));
        self->state.core->worker_joined(a.joined.rank, a.joined.clock);
        settle_held(self);
        return caf::ok_atom::value;
      },
      [=](start_atom, shard_start& s) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "a start")) return refused();
        if (!self->state.core && !self->state.kv) return not_started(self);
        if (s.identities.size() != s.members.workers.size())
          return make_error(errc::bad_job, "a start names " + std::to_string(s.members.workers.size()) +
                                               " members but " + std::to_string(s.identities.size()) + " identities");
        for (std::size_t i = 0; i < s.identities.size(); ++i)
          record_member(self, s.members.workers[i], std::move(s.identities[i]));
        if (self->state.kv)
          self->state.kv->start(s.members.workers);
        else
          self->state.core->start(s.members.workers, s.members.stages);
        return caf::ok_atom::value;
      },
      [=](push_atom, push_grads& p) -> caf::result<push_ack> {
        if (!from_member(self, p.worker, "a push")) return refused();
        if (!self->state.core) return not_started(self);
        if (p.shard != self->state.index) return wrong_shard(self, p.shard);
        auto& st = self->state;
        if (!p.shared.empty()) {
          // Borrowed from the worker's slot when the core does not keep it: the worker
          // writes that slot again only after this push is answered.
          auto grad = st.channels ? st.channels->take_push(p.worker, p.shared, !st.core->keeps_gradients())
                                  : expected<tensor>(failure{"this shard's same-host fast path is off"});
          if (!grad) {
            spdlog::warn("shard {}: refused the gradient of worker {} (clock {}) from shared memory: {}", st.index,
                         p.worker, p.clock, grad.error().message);
            return make_error(errc::malformed, "the gradient's shared-memory slot: " + grad.error().message);
          }
          p.grad = std::move(*grad);
        }
        if (st.m) st.m->bytes_received->Increment(static_cast<double>(p.grad.nbytes()));
        if (st.compression.kind != codec_kind::none) {
          auto grad = decode(st.compression, p.grad, st.core->slice_numel(p.worker));
          if (!grad) {
            if (st.m) st.m->rejected(to_string(errc::malformed))->Increment();
            spdlog::warn("shard {}: refused the gradient of worker {} (clock {}): {}", st.index, p.worker, p.clock,
                         grad.error().message);
            return make_error(errc::malformed, grad.error().message);
          }
          p.grad = std::move(*grad);
        }
        const auto t0 = wall::now();
        shard_core::push_outcome out;
        if (auto f = catch_compute("shard " + std::to_string(st.index) + ": applying a gradient of worker " +
                                       std::to_string(p.worker),
                                   [&] { out = st.core->push(p.worker, p.clock, p.base_version, std::move(p.grad)); })) {
          spdlog::error("{}", to_string(*f));
          return make_error(*f);
        }
        if (st.obs.trace) st.obs.trace->span(st.track, "apply", t0, wall::now());
        settle_held(self);
        observe(self);
        if (out.error) {
          if (st.m) st.m->rejected(to_string(*out.error))->Increment();
          spdlog::warn("shard {}: rejected a gradient from worker {} (clock {}): {}: {}", st.index, p.worker, p.clock,
                       to_string(*out.error), out.detail);
          return make_error(*out.error, out.detail);
        }
        if (st.m) st.m->staleness->Observe(static_cast<double>(out.staleness));
        return push_ack{out.version, out.staleness};
      },
      [=](pull_atom, const pull_request& r) -> caf::result<params_reply> {
        if (!from_member(self, r.worker, "a pull")) return refused();
        if (!self->state.core) return not_started(self);
        if (r.shard != self->state.index) return wrong_shard(self, r.shard);
        const auto token = self->state.next_token++;
        auto out = self->state.core->pull(r.worker, r.clock, token);
        switch (out.decision) {
          case shard_core::pull_decision::answer: return answer(self, r.worker, r.reply_to);
          case shard_core::pull_decision::reject:
            if (self->state.m) self->state.m->rejected(to_string(*out.error))->Increment();
            return make_error(*out.error, out.detail);
          case shard_core::pull_decision::hold: break;
        }
        auto promise = self->make_response_promise<params_reply>();
        self->state.held.emplace(token, held_pull{promise, wall::now(), r.worker, r.reply_to});
        observe(self);
        return promise;
      },
      [=](snapshot_atom) -> caf::result<params_reply> {
        if (!from_coordinator(self, coordinator, "a snapshot request")) return refused();
        if (!self->state.core) return not_started(self);
        return snapshot(self);
      },
      [=](stats_atom) -> caf::result<shard_stats> {
        if (!from_coordinator(self, coordinator, "a statistics request")) return refused();
        if (!self->state.core) return not_started(self);
        const auto& core = *self->state.core;
        const auto& c = core.counters();
        shard_stats s;
        s.shard = self->state.index;
        s.version = core.version();
        s.updates = c.updates;
        s.gradients = c.gradients;
        s.rejected = c.rejected;
        s.pulls = c.pulls;
        s.pulls_held = c.pulls_held;
        s.held_now = static_cast<std::int64_t>(core.held());
        s.staleness_sum = c.staleness_sum;
        s.staleness_count = c.staleness_count;
        s.staleness_max = c.staleness_max;
        s.staleness_hist.assign(c.staleness_hist.begin(), c.staleness_hist.end());
        return s;
      },
      [=](left_atom, std::uint32_t rank) {
        if (!from_coordinator(self, coordinator, "a leave")) return;
        if (self->state.kv) {
          if (rank < self->state.members.size()) self->state.members[rank] = {};
          self->state.kv->member_left(rank);
          settle_kv(self);
          return;
        }
        if (!self->state.core) return;
        if (rank < self->state.members.size()) self->state.members[rank] = {};
        if (self->state.channels) self->state.channels->forget(rank);
        self->state.core->worker_left(rank);
        settle_held(self);
      },
      [=](kv_define_atom, const kv_define& d) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "a key definition")) return refused();
        if (!self->state.kv) return not_kv(self);
        if (d.parts.size() != d.values.size())
          return make_error(errc::malformed, "a key definition with " + std::to_string(d.parts.size()) + " parts and " +
                                                 std::to_string(d.values.size()) + " values");
        for (std::size_t i = 0; i < d.parts.size(); ++i)
          if (auto e = self->state.kv->define(d.parts[i], d.name, d.values[i])) return make_error(*e);
        return caf::ok_atom::value;
      },
      [=](kv_opt_atom, const kv_set_optimizer& o) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "an optimizer")) return refused();
        if (!self->state.kv) return not_kv(self);
        self->state.kv->set_optimizer(o.has_optimizer ? std::optional<kv_optimizer>(kv_optimizer{o.config, o.schedule})
                                                      : std::nullopt);
        return caf::ok_atom::value;
      },
      [=](push_atom, const kv_push& p) -> caf::result<kv_push_ack> {
        if (!from_member(self, p.worker, "a push")) return refused();
        if (!self->state.kv) return not_kv(self);
        if (p.shard != self->state.index) return wrong_shard(self, p.shard);
        auto& kv = *self->state.kv;
        if (auto e = check_kv_parts(kv, p.parts)) return make_error(*e);
        std::int64_t total = 0;
        for (auto part : p.parts) total += kv.value(part).numel();
        if (p.base_versions.size() != p.parts.size() || p.data.type() != dtype::f32 || p.data.numel() != total)
          return make_error(errc::malformed, "a push of " + std::to_string(p.parts.size()) + " parts (" +
                                                 std::to_string(total) + " floats) carries " +
                                                 std::to_string(p.data.numel()) + " values");
        if (self->state.m) self->state.m->bytes_received->Increment(static_cast<double>(p.data.nbytes()));
        kv_push_ack ack;
        std::int64_t pos = 0;
        std::optional<fault> failed;
        for (std::size_t i = 0; i < p.parts.size() && !failed; ++i) {
          const std::int64_t n = kv.value(p.parts[i]).numel();
          if (auto f = catch_compute("shard " + std::to_string(self->state.index) + ": a push", [&] {
                auto r = kv.push(p.worker, p.parts[i], p.base_versions[i], p.data.view().flat(pos, n));
                if (r.error) failed = r.error;
                ack.versions.push_back(r.version);
                ack.staleness.push_back(r.staleness);
                if (self->state.m && !r.error) self->state.m->staleness->Observe(static_cast<double>(r.staleness));
              }))
            failed = f;
          pos += n;
        }
        settle_kv(self);
        if (self->state.m) {
          self->state.m->updates->Increment(0);
          self->state.m->mailbox->Set(static_cast<double>(self->mailbox().size()));
        }
        if (failed) {
          if (self->state.m) self->state.m->rejected(to_string(failed->code))->Increment();
          spdlog::warn("shard {}: refused a push of worker {}: {}", self->state.index, p.worker, to_string(*failed));
          return make_error(*failed);
        }
        return ack;
      },
      [=](pull_atom, kv_pull& r) -> caf::result<kv_pull_reply> {
        if (!from_member(self, r.worker, "a pull")) return refused();
        if (!self->state.kv) return not_kv(self);
        if (r.shard != self->state.index) return wrong_shard(self, r.shard);
        auto& st = self->state;
        auto& kv = *st.kv;
        if (auto e = check_kv_parts(kv, r.parts)) return make_error(*e);
        if (r.rows.size() != r.parts.size() || r.row_numel.size() != r.parts.size())
          return make_error(errc::malformed, "a pull whose rows do not match its parts");
        for (std::size_t i = 0; i < r.parts.size(); ++i)
          for (auto row : r.rows[i])
            if (row < 0 || r.row_numel[i] <= 0 || (row + 1) * r.row_numel[i] > kv.value(r.parts[i]).numel())
              return make_error(errc::bad_shape, "a pull asks for row " + std::to_string(row) +
                                                     ", outside its part of the key");
        const std::uint64_t id = st.next_kv_pull++;
        held_kv_pull h;
        std::vector<kv_shard_core::token> held;
        for (auto part : r.parts) {
          const auto t = st.next_token++;
          auto o = kv.pull(r.worker, part, t);
          if (o.decision == kv_shard_core::pull_decision::reject) {
            for (auto ht : held) st.kv_tokens.erase(ht);
            return make_error(*o.error);
          }
          if (o.decision == kv_shard_core::pull_decision::hold) {
            st.kv_tokens[t] = id;
            held.push_back(t);
            ++h.waiting;
          }
        }
        if (h.waiting == 0) return kv_answer(self, r);
        h.promise = self->make_response_promise<kv_pull_reply>();
        h.request = std::move(r);
        auto promise = h.promise;
        st.kv_held.emplace(id, std::move(h));
        return promise;
      },
  };
}

}  // namespace

local_shard_actor spawn_shard_server(caf::actor_system& sys, coordinator_actor coordinator, std::string job_id,
                                     std::chrono::milliseconds join_timeout, observability obs,
                                     std::string fast_path_tag) {
  return sys.spawn(shard_server, std::move(coordinator), std::move(job_id), join_timeout, std::move(obs),
                   std::move(fast_path_tag));
}

void join_as_shard(const local_shard_actor& shard, std::string host, std::uint16_t port, std::string proof) {
  caf::anon_send(shard, join_trigger{std::move(host), port, std::move(proof)});
}

}  // namespace troupe
