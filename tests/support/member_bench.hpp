// Test helper: the members of one job (member_core) run against one shard_core in one
// thread, without actors. Every action a member returns is delivered as the shells
// would deliver it, through a FIFO queue: pulls and pushes go to the shard (compressed
// pushes decoded first, as its shell does; held pulls are answered when it releases them),
// activations to the neighbour, ring pieces to the next replica, reports are kept.
// Deterministic: the same job gives the same bits every time.
#pragma once

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/job.hpp"
#include "core/job_core.hpp"
#include "core/member_core.hpp"
#include "core/shard_core.hpp"
#include "core/shard_for.hpp"

namespace troupe::test {

// n synthetic training samples (and 100 test samples) for a bench's members to read.
inline std::shared_ptr<const dataset_split> synthetic(std::int64_t n) {
  return std::make_shared<const dataset_split>(make_synthetic(n, 100, 3));
}

// A sync job of one replica of `stages` stages, `microbatches` a step, 2 epochs of
// batches of 40, for a bench's members (servers 0: the stages apply the optimizer).
inline job_spec member_job(std::uint32_t stages, std::int32_t microbatches, std::uint32_t servers = 1) {
  job_spec j;
  j.job_id = "member-under-test";
  j.mode = sync_mode::sync;
  j.workers = 1;
  j.servers = servers;
  j.pipeline_stages = stages;
  j.microbatches = microbatches;
  j.train.epochs = 2;
  j.train.batch_size = 40;
  return j;
}

// Why `actions` stop their member ("code: detail"), or "" where none stops it.
inline std::string stop_of(const member_actions_list& actions) {
  for (const auto& a : actions)
    if (auto* s = std::get_if<member_actions::stop>(&a)) return to_string(s->why);
  return "";
}

struct member_bench {
  job_spec job;
  std::shared_ptr<const dataset_split> data;
  model m;
  key_table table;
  std::unique_ptr<shard_core> shard;  // none with --servers 0
  std::vector<std::unique_ptr<member_core>> members;
  std::deque<std::function<void()>> queue;
  // What happened.
  std::vector<step_report> steps;
  std::vector<worker_epoch> epochs;
  std::map<std::uint32_t, worker_done> done;
  std::map<std::uint32_t, fault> stopped;
  std::vector<std::string> warnings;
  std::uint64_t frame_bytes = 0;  // what the last welcome bound frames to
  std::vector<rows_answer> answers;  // to grants of rows
  std::vector<kv_pull> pulls;
  int poison_pushes = 0;  // put a NaN into this many pushes, which the shard refuses
  bool reverse_pieces = false;  // answer the pieces of one step's pulls last first
  // A slow member: the answers to its pulls go to the back of the queue this many times
  // before they are delivered, while the others go on.
  std::int64_t slow_member = -1;
  int slow_requeues = 0;
  // --mode allreduce: sees every ring piece on its way from member r (and may change it);
  // false drops it. Unset: every piece is delivered. reverse_ring: each piece goes to the
  // front of the queue (pieces then arrive in another order than they were sent).
  std::function<bool(std::uint32_t from, ring_piece& p)> on_ring;
  bool reverse_ring = false;
  // Note [Members' checkpoints]: the checkpoint files members asked to write, by member
  // (kept, not written), and the checkpoint every member is welcomed to resume from.
  std::vector<std::pair<std::uint32_t, member_actions::save_checkpoint>> checkpoints;
  shard_resume resume;

  // job: not yet prepared; data: what the members read (the job's own unless given).
  member_bench(job_spec j, std::shared_ptr<const dataset_split> d, member_setup setup = {})
      : job(std::move(j)), data(std::move(d)), m(*prepare(job, *data)) {
    if (job.servers > 0) {
      table = partition_parameters(m, 1, job.big_array_bound);
      auto built = shard_for(shard_welcome{0, job, table.ranges_of(0), {}});
      BOOST_REQUIRE(built.has_value());
      shard = std::move(built->core);
      std::vector<std::uint32_t> ranks, stages;
      for (std::uint32_t r = 0; r < troupe::members(job); ++r) {
        ranks.push_back(r);
        stages.push_back(r % job.pipeline_stages);
      }
      shard->start(ranks, stages);
    }
    if (!setup.data)
      setup.data = [this](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> { return data; };
    for (std::uint32_t r = 0; r < troupe::members(job); ++r) members.push_back(std::make_unique<member_core>(setup));
  }

  static expected<model> prepare(job_spec& job, const dataset_split& d) {
    auto m = prepare_job(job, d);
    BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
    return m;
  }

  member_assignment assignment(std::uint32_t rank, std::int64_t resume_clock = 0) const {
    member_assignment a = basic_assignment(job, table, rank, resume_clock);
    a.resume = resume;
    return a;
  }

  // Welcomes and wires every member; with resume_clock > 0, as replacements joining at
  // that clock (the shard is told first, as the coordinator does).
  void start(std::int64_t resume_clock = 0) {
    for (std::uint32_t r = 0; r < members.size(); ++r) {
      if (resume_clock > 0 && shard) shard->member_joined(r, resume_clock, r % job.pipeline_stages);
      deliver(r, members[r]->on_welcome(assignment(r, resume_clock)));
      deliver(r, members[r]->on_wired());
    }
  }

  // Delivers queued work until none is left (or `limit` deliveries).
  void run(std::size_t limit = 10'000'000) {
    while (!queue.empty() && limit-- > 0) {
      auto next = std::move(queue.front());
      queue.pop_front();
      next();
    }
  }

  // The model's parameters as the shard holds them now.
  tensor params() const {
    tensor full({m.num_params()});
    unpack_shard(full, shard->params(), table.ranges_of(0));
    return full;
  }

  // The answer to member r's pull: its slice, or the piece it asked for.
  kv_pull_reply answer(std::uint32_t r, const kv_pull& q) const {
    kv_pull_reply p{0, {shard->version_for(r)}, tensor(), {}, {}, q.piece_offset, q.piece_numel};
    p.data = q.piece_numel > 0 ? shard->piece_for(r, q.piece_offset, q.piece_numel)
                               : shard->pack_slice(r, shard->params());
    return p;
  }

  void deliver(std::uint32_t rank, member_actions_list actions) {
    for (auto& action : actions) std::visit([&](auto& a) { handle(rank, a); }, action);
  }

 private:
  member_core& at(std::uint32_t r) { return *members[r]; }
  void later(std::uint32_t r, std::function<member_actions_list(member_core&)> f) {
    queue.push_back([this, r, f] { deliver(r, f(at(r))); });
  }
  // An answer to a pull: queued last, or first for a piece when reverse_pieces (so the
  // pieces of one list of pulls arrive in reverse).
  void answer_later(std::uint32_t r, const kv_pull& q) {
    auto work = [this, r, p = answer(r, q)] { deliver(r, at(r).on_params(0, p)); };
    if (static_cast<std::int64_t>(r) == slow_member) {
      queue.push_back(requeued(std::move(work), slow_requeues));
      return;
    }
    if (reverse_pieces && q.piece_numel > 0)
      queue.push_front(std::move(work));
    else
      queue.push_back(std::move(work));
  }
  std::function<void()> requeued(std::function<void()> work, int times) {
    if (times == 0) return work;
    return [this, work = std::move(work), times] { queue.push_back(requeued(work, times - 1)); };
  }
  std::map<shard_core::token, std::pair<std::uint32_t, kv_pull>> held_;
  shard_core::token next_token_ = 0;

  void handle(std::uint32_t r, member_actions::pull& a) {
    pulls.push_back(a.request);
    const auto token = next_token_++;
    const auto out = shard->pull(r, a.request.clock, token);
    if (out.decision == shard_core::pull_decision::answer)
      answer_later(r, a.request);
    else if (out.decision == shard_core::pull_decision::reject)
      later(r, [why = out.error->detail](member_core& c) { return c.on_pull_failed(0, why); });
    else
      held_.emplace(token, std::pair{r, a.request});
  }
  void handle(std::uint32_t r, member_actions::push& a) {
    const std::int64_t clock = a.grads.clock;
    if (job.compression.kind != codec_kind::none && a.grads.data.type() != dtype::f32) {  // as the shard's shell does
      auto decoded = decode(job.compression, a.grads.data,
                            a.grads.piece_numel > 0 ? a.grads.piece_numel : at(r).slice_numel(0));
      BOOST_REQUIRE_MESSAGE(decoded.has_value(), (decoded ? "" : decoded.error().message));
      a.grads.data = std::move(*decoded);
    }
    if (poison_pushes > 0 && poison_pushes--) a.grads.data.data<float>()[0] = std::nanf("");
    const auto out = shard->push(r, clock, a.grads.base_versions.at(0), std::move(a.grads.data),
                                 {{}, a.grads.piece_offset, a.grads.piece_numel});
    if (out.error)
      later(r, [clock, why = to_string(*out.error)](member_core& c) {
        return c.on_push_refused(0, clock, why);
      });
    else
      later(r, [clock, ack = kv_push_ack{{out.version}, {out.staleness}, out.late}](member_core& c) {
        return c.on_push_ack(0, clock, ack, 0.0);
      });
    for (auto token : shard->take_released()) {
      auto [member, request] = held_.at(token);
      held_.erase(token);
      answer_later(member, request);
    }
  }
  void handle(std::uint32_t r, member_actions::send_activation& a) {
    later(r + 1, [a = std::move(a.a), r](member_core& c) mutable {
      return c.on_activation(std::move(a), true, "member " + std::to_string(r));
    });
  }
  void handle(std::uint32_t r, member_actions::send_activation_grad& a) {
    later(r - 1, [g = std::move(a.g), r](member_core& c) mutable {
      return c.on_activation_grad(std::move(g), true, "member " + std::to_string(r));
    });
  }
  void handle(std::uint32_t r, member_actions::send_ring_piece& a) {
    if (on_ring && !on_ring(r, a.p)) return;
    auto work = [this, to = at(r).ring_next(), p = std::move(a.p), r]() mutable {
      deliver(to, at(to).on_ring_piece(std::move(p), true, "member " + std::to_string(r)));
    };
    if (reverse_ring)
      queue.push_front(std::move(work));
    else
      queue.push_back(std::move(work));
  }
  void handle(std::uint32_t, member_actions::report_step& a) { steps.push_back(a.r); }
  void handle(std::uint32_t, member_actions::report_epoch& a) { epochs.push_back(std::move(a.r)); }
  void handle(std::uint32_t, member_actions::send_group_id&) { BOOST_FAIL("the bench has no local groups"); }
  void handle(std::uint32_t, member_actions::await_group_id&) { BOOST_FAIL("the bench has no local groups"); }
  void handle(std::uint32_t r, member_actions::schedule_step&) {
    later(r, [](member_core& c) { return c.on_next_step(); });
  }
  void handle(std::uint32_t r, member_actions::resume&) { deliver(r, at(r).on_resume()); }
  void handle(std::uint32_t, member_actions::warn& a) { warnings.push_back(a.text); }
  void handle(std::uint32_t, member_actions::answer_rows& a) { answers.push_back(a.a); }
  void handle(std::uint32_t r, member_actions::save_checkpoint& a) { checkpoints.emplace_back(r, std::move(a)); }
  void handle(std::uint32_t r, member_actions::finish& a) { done[r] = a.r; }
  void handle(std::uint32_t r, member_actions::stop& a) { stopped[r] = a.why; }
  void handle(std::uint32_t, member_actions::bound_frames& a) { frame_bytes = a.bytes; }
};

}  // namespace troupe::test
