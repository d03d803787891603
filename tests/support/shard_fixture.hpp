// Test fixture: one shard server of a tiny job (all 15 parameters on it, plain SGD at lr 1,
// with no correction for asynchrony: every push moves by its own gradient)
// under CAF's deterministic scheduler, with a stand-in coordinator and member stand-in
// actors that push and pull as a rank (or as strangers), recording the answers. Optionally
// the shard has a bulk lane end (transport/lane.hpp) that the test drives by hand.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "actors/lone_shard.hpp"
#include "actors/shard_server.hpp"
#include "tests/support/caf_fixture.hpp"
#include "tests/support/numeric.hpp"
#include "tests/support/tiny_job.hpp"

namespace troupe::test {

inline job_spec shard_job(sync_mode mode) {
  job_spec j = tiny_job(mode, 2, 1);
  j.train.lr = 1.f;
  j.train.warmup_epochs = 0.f;
  j.train.schedule = lr_schedule_kind::constant;
  j.train.optimizer = optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f};
  j.async_correction = async_rule::none;
  return j;
}

inline constexpr std::int64_t numel = 15;

struct recorder {
  std::vector<kv_push_ack> acks;
  std::vector<kv_pull_reply> params;  // pulls' answers
  std::vector<caf::error> errors;
};

inline tensor filled(float v) { return filled(numel, v); }

// Runs a function in a member stand-in actor (so its requests come from that actor).
struct act {
  std::function<void(caf::event_based_actor*)> f;
};

}  // namespace troupe::test

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::test::act)

namespace troupe::test {

struct shard_fixture : deterministic_system {
  lone_coordinator_actor coord;
  shard_actor shard;
  std::vector<caf::actor> members;  // by rank, as they joined the stand-in coordinator
  recorder rec;

  void boot(sync_mode mode, const std::function<void(job_spec&)>& tweak = {},
            std::shared_ptr<lane::shard_end> lanes = nullptr) {
    job_spec job = shard_job(mode);
    if (tweak) tweak(job);
    coord = own(spawn_lone_coordinator(*sys, job, numel));
    auto local = own(spawn_shard_server(*sys, coord, "job-under-test", std::chrono::seconds(10), {}, {}, lanes));
    join_as_shard(local, {}, 0);
    shard = local;
    sched->run();
  }
  static caf::behavior member_behaviour(caf::event_based_actor* self) {
    return {[=](const act& a) { a.f(self); }};
  }
  // The job's two members join the stand-in coordinator, which starts the shard with them.
  void start() {
    for (int r = 0; r < 2; ++r) {
      members.push_back(own(sys->spawn(member_behaviour)));
      auto c = coord;
      run_as(members.back(), [c](caf::event_based_actor* self) {
        self->request(c, caf::infinite, join_atom::value, worker_join{"job-under-test", {}, 0, {}, {}, -1})
            .then([](const worker_welcome&) {});
      });
      sched->run();
    }
  }
  void run_as(const caf::actor& who, std::function<void(caf::event_based_actor*)> f) {
    caf::anon_send(who, act{std::move(f)});
  }
  // The member of that rank, or (for a rank nobody holds) a stranger.
  caf::actor as(std::uint32_t worker) {
    return worker < members.size() ? members[worker] : own(sys->spawn(member_behaviour));
  }
  void push(std::uint32_t worker, std::int64_t clock, tensor g, std::uint32_t to_shard = 0) {
    push_from(as(worker), worker, clock, std::move(g), to_shard);
  }
  void push_from(const caf::actor& who, std::uint32_t worker, std::int64_t clock, tensor g, std::uint32_t to_shard = 0) {
    send_push(who, step_push(to_shard, worker, 0, clock, clock, g));
  }
  // A piece [offset, offset + g.numel()) of worker's gradient (Note [Gradient pieces]).
  void push_piece(std::uint32_t worker, std::int64_t clock, tensor g, std::int64_t offset) {
    kv_push p = step_push(0, worker, 0, clock, clock, g);
    p.piece_offset = offset;
    p.piece_numel = g.numel();
    send_push(as(worker), p);
  }
  // Any push message, from `who`; its answer is recorded.
  void send_push(const caf::actor& who, kv_push p) {
    auto s = shard;
    auto* r = &rec;
    run_as(who, [=](caf::event_based_actor* self) {
      self->request(s, caf::infinite, push_atom::value, p)
          .then([=](const kv_push_ack& a) { r->acks.push_back(a); }, [=](caf::error& e) { r->errors.push_back(e); });
    });
  }
  void pull(std::uint32_t worker, std::int64_t clock, std::int64_t piece_offset = 0, std::int64_t piece_numel = 0) {
    pull_from(as(worker), worker, clock, piece_offset, piece_numel);
  }
  void pull_from(const caf::actor& who, std::uint32_t worker, std::int64_t clock, std::int64_t piece_offset = 0,
                 std::int64_t piece_numel = 0) {
    kv_pull q = step_pull(0, worker, 0, clock);
    q.piece_offset = piece_offset;
    q.piece_numel = piece_numel;
    send_pull(who, q);
  }
  // Any pull message, from `who`; its answer is recorded.
  void send_pull(const caf::actor& who, kv_pull q) {
    auto s = shard;
    auto* r = &rec;
    run_as(who, [=](caf::event_based_actor* self) {
      self->request(s, caf::infinite, pull_atom::value, q)
          .then([=](kv_pull_reply& p) { r->params.push_back(std::move(p)); },
                [=](caf::error& e) { r->errors.push_back(e); });
    });
  }
  params_reply snapshot() {
    params_reply out;
    auto c = coord;
    sys->spawn([=, &out](caf::event_based_actor* self) {
      self->request(c, caf::infinite, lone_snapshot{}).then([&out](params_reply& p) { out = std::move(p); });
    });
    sched->run();
    return out;
  }
};

}  // namespace troupe::test
