// member_core, part 3: the end of a step: the loss check, the local group's all-reduce,
// the update (pushes to the shards, or the local optimizer), the reports, the next step,
// and finishing once the last pushes are answered.
#include <algorithm>
#include <cmath>

#include "core/job.hpp"
#include "core/key_table.hpp"
#include "core/member_core.hpp"

namespace troupe {

using namespace member_actions;

void member_core::push_all(member_actions_list& out) {
  const auto p0 = wall::now();
  const tensor* grads = &synthetic_grad_;
  if (!simulated() && !guarded("downloading its gradients", out, [&] { grads = &rep_->fetch_grads(); })) return;
  for (std::uint32_t s : active_) {
    const grad_codec& codec = place_.job.compression;
    const bool plain = codec.kind == codec_kind::none;
    tensor g = plain && setup_.push_buffer ? setup_.push_buffer(s, slice_numel_[s]) : tensor();
    if (g.empty()) g = tensor::uninitialized({slice_numel_[s]});
    pack_shard(g, *grads, ranges_[s]);
    // NaN or Inf goes as f32: the shard refuses it as not_finite and counts it (in sync as
    // a submission that adds nothing, so the round closes).
    if (!plain) g = encode_for_push(codec, std::move(g), &residual_[s]);
    bytes_pushed_ += static_cast<std::int64_t>(g.nbytes());
    if (m_) m_->bytes_sent->Increment(static_cast<double>(g.nbytes()));
    ++acks_pending_;
    out.push_back(push{s, push_grads{s, place_.rank, clock_, base_version_[s], std::move(g), {}}});
  }
  if (!active_.empty()) trace_span("push", p0, wall::now());
}

// Every action of the minibatch is done: update (through the shards or locally), report.
void member_core::end_step(member_actions_list& out) {
  const job_spec& job = place_.job;
  in_step_ = false;
  if (dm_ && !guarded("reading its device memory", out, [&] {
        const troupe_memory_stats mem = backend_->memory();
        dm_->record(mem.bytes_in_use, mem.bytes_cached, mem.cache_hits, mem.device_mallocs);
      }))
    return;
  const auto window_end = wall::now();
  const bool reports_loss = last_stage();
  const double loss = reports_loss ? step_loss_ : 0.0;
  if (reports_loss && !simulated() && !std::isfinite(loss)) {
    stop({errc::diverged, "the training loss became " + std::to_string(loss) + " on " + who() + " at epoch " +
                              std::to_string(epoch_ + 1) + "; lower --lr or lengthen --warmup-epochs"},
         out);
    return;
  }
  if (grouped()) {
    const auto r0 = wall::now();
    if (!in_group("gradient all-reduce", out, [&] { rep_->all_reduce_grads(*comm_); })) return;
    trace_span("all-reduce", r0, wall::now());
  }
  if (local_opt_) {
    const auto u0 = wall::now();
    if (!simulated() && !guarded("the optimizer step", out, [&] {
          local_opt_->step(rep_->params(), rep_->fetch_grads(), schedule_.at(clock_));
          rep_->commit_params();
        }))
      return;
    trace_span("update", u0, wall::now());
  } else {
    push_all(out);
    if (phase_ == member_phase::stopped) return;
  }
  const double waited = seconds_between(params_ready_, window_end) - busy_;
  trace_span("step", step_begin_, wall::now());
  const std::int64_t samples = reports_loss ? batch_ : 0;
  if (m_) {
    m_->step_seconds->Observe(seconds_between(step_begin_, wall::now()));
    m_->forward_seconds->Observe(forward_s_);
    m_->backward_seconds->Observe(backward_s_);
    m_->samples->Increment(static_cast<double>(samples));
    if (reports_loss) m_->loss->Set(loss);
    m_->epoch->Set(epoch_);
    m_->learning_rate->Set(schedule_.at(clock_));
    m_->clock->Set(static_cast<double>(clock_ + 1));
  }
  if (sm_) {
    sm_->busy_seconds->Increment(busy_);
    sm_->bubble_seconds->Increment(std::max(0.0, waited));
  }
  epoch_loss_ += loss;
  epoch_samples_ += samples;
  ++clock_;
  ++step_in_epoch_;
  out.push_back(report_step{step_report{place_.rank, clock_, epoch_, loss, samples, busy_,
                                        micros(first_action_.value_or(window_end)), micros(window_end)}});
  if (step_in_epoch_ == steps_per_epoch_) {
    const double secs = std::chrono::duration<double>(steady::now() - epoch_start_).count();
    worker_epoch report{place_.rank, epoch_, epoch_loss_, reports_loss ? steps_per_epoch_ : 0, epoch_samples_, secs,
                        tensor()};
    if (local_opt_ && rep_) report.params = rep_->params();
    out.push_back(report_epoch{std::move(report)});
    if (++epoch_ == job.train.epochs) {
      phase_ = member_phase::finishing;
      maybe_finish(out);
      return;
    }
    begin_epoch();
  }
  start_pulls(out);
}

member_actions_list member_core::on_push_ack(std::uint32_t, double seconds) {
  member_actions_list out;
  if (m_) m_->push_seconds->Observe(seconds);
  --acks_pending_;
  maybe_finish(out);
  return out;
}

// A refused gradient is counted and the loop goes on.
member_actions_list member_core::on_push_refused(std::uint32_t s, std::int64_t clock, const std::string& why) {
  member_actions_list out{warn{who() + ": shard " + std::to_string(s) + " refused the gradient of clock " +
                               std::to_string(clock) + ": " + why}};
  ++rejected_;
  if (m_) m_->rejected->Increment();
  --acks_pending_;
  maybe_finish(out);
  return out;
}

void member_core::maybe_finish(member_actions_list& out) {
  if (phase_ != member_phase::finishing || acks_pending_ > 0) return;
  phase_ = member_phase::stopped;
  out.push_back(finish{worker_done{place_.rank, clock_, rejected_, peak_, bytes_pushed_}});
}

}  // namespace troupe
