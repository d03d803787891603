// member_core, part 3: the end of a step: the loss check, the local group's all-reduce,
// the update (pushes to the shards, or the local optimizer), the reports, the next step,
// and finishing once the last pushes are answered.
#include <algorithm>
#include <cmath>
#include <utility>

#include "base/fingerprint.hpp"
#include "core/job.hpp"
#include "core/key_table.hpp"
#include "core/member_core.hpp"

namespace troupe {

using namespace member_actions;

void member_core::push_all(member_actions_list& out) {
  for (std::size_t k = 0; k < slices_.buckets().size() && phase_ != member_phase::stopped; ++k) push_bucket(k, out);
}

void member_core::push_bucket(std::size_t k, member_actions_list& out) {
  const auto p0 = wall::now();
  const bool last = k + 1 == slices_.buckets().size();
  const gradient_bucket& bucket = slices_.buckets()[k];
  const grad_codec& codec = place_.job.compression;
  const bool plain = codec.kind == codec_kind::none;
  const auto& active = slices_.active();
  if (!last && std::none_of(active.begin(), active.end(), [&](std::uint32_t s) { return in_pieces(s); })) return;
  const tensor* grads = &synthetic_grad_;
  // The last bucket brings every gradient down (whole slices need them all); the others
  // only their own.
  if (!simulated() && !guarded("downloading its gradients", out, [&] {
        grads = last ? &rep_->fetch_grads() : &rep_->fetch_grads(bucket.lo, bucket.hi - bucket.lo);
      }))
    return;
  bool pushed = false;
  for (std::uint32_t s : active) {
    const bool pieces = in_pieces(s);
    if (!pieces && !last) continue;
    const slice_piece piece = pieces ? slices_.piece(s, k) : slice_piece{0, slices_.numel(s)};
    if (piece.numel == 0) continue;
    const bool whole = piece.numel == slices_.numel(s);
    tensor g = plain && whole && setup_.links ? setup_.links->push_buffer(s, piece.numel) : tensor();
    if (g.empty()) g = tensor::uninitialized({piece.numel});
    if (whole)
      pack_shard(g, *grads, slices_.ranges(s));
    else
      pack_piece(g, *grads, slices_.ranges(s), bucket.lo, bucket.hi);
    // NaN or Inf goes as f32: the shard refuses it as not_finite and counts it (in sync as
    // a submission that adds nothing, so the round closes).
    if (!plain)
      g = encode_for_push(codec, std::move(g),
                          pushes_.residual(s).empty() ? tensor_view()
                                                     : pushes_.residual(s).view().flat(piece.offset, piece.numel));
    pushes_.sent(g.nbytes());
    meters_.bytes_sent(g.nbytes());
    kv_push p = step_push(s, place_.rank, stage_, time_.clock(), pulls_.base_version(s), std::move(g));
    if (!whole) {
      p.piece_offset = piece.offset;
      p.piece_numel = piece.numel;
    }
    out.push_back(push{s, std::move(p)});
    pushed = true;
  }
  if (pushed) trace_span("push", p0, wall::now());
  if (pushed && last) save_residuals_if_due(out);
}

// Whether the step's loss (known to the last stage once every forward has run) is finite;
// if not, the member stops with `diverged`.
bool member_core::loss_is_finite(member_actions_list& out) {
  if (!last_stage() || simulated() || std::isfinite(step_.loss)) return true;
  stop({errc::diverged, "the training loss became " + std::to_string(step_.loss) + " on " + who() + " at epoch " +
                            std::to_string(time_.epoch() + 1) + "; lower --lr or lengthen --warmup-epochs"},
       out);
  return false;
}

// Every action of the minibatch is done: sum the gradient (local group, ring), update
// (through the shards or locally), report.
void member_core::end_step(member_actions_list& out) {
  step_.running = false;
  if (meters_.watches_device() &&
      !guarded("reading its device memory", out, [&] { meters_.device_memory(device_.memory()); }))
    return;
  step_.window_end = wall::now();
  if (!loss_is_finite(out)) return;
  if (grouped()) {
    const auto r0 = wall::now();
    if (!in_group("gradient all-reduce", out, [&] { rep_->all_reduce_grads(device_.group()); })) return;
    trace_span("all-reduce", r0, wall::now());
  }
  if (ringed()) {
    start_ring(out);  // goes on at update_and_report once the ring is done
    return;
  }
  if (place_.job.mode == sync_mode::allreduce && !take_leaders_sum(out)) return;
  update_and_report(out);
}

// --mode allreduce, after the local group's sum (if any) and the ring (if this member
// sits in one): gives the group its leader's sum when the leaders rang it (Note [Rings of
// leaders] in core/ring_seats.cpp), and leaves the step's final gradient in the host
// gradients. False: the member stopped.
bool member_core::take_leaders_sum(member_actions_list& out) {
  if (!grouped()) {
    if (ringed() || simulated()) return true;  // a ring leaves its sum on the host
    return guarded("downloading its gradients", out, [&] { rep_->fetch_grads(); });
  }
  const bool rang = place_.ring.size() >= 2;  // else the group's sum is every replica's
  const auto s0 = wall::now();
  if (!in_group("gradient broadcast", out, [&] {
        if (rang) rep_->share_grads(device_.group(), group_leader());
        else rep_->fetch_grads();
      }))
    return false;
  if (rang) trace_span("broadcast", s0, wall::now());
  if (place_.job.ring_op == reduce_op::avg) {  // the ring of leaders summed (Note [Rings of leaders])
    const float n = static_cast<float>(place_.job.workers);
    float* g = rep_->grads().data<float>();
    for (std::int64_t i = 0; i < rep_->grads().numel(); ++i) g[i] /= n;
  }
  return true;
}

void member_core::update_and_report(member_actions_list& out) {
  const auto window_end = step_.window_end;
  const bool reports_loss = last_stage();
  const double loss = reports_loss ? step_.loss : 0.0;
  if (local_opt_) {
    const auto u0 = wall::now();
    if (!simulated() && !guarded("the optimizer step", out, [&] {
          // In --mode allreduce the host gradients hold the sum (fetching again would undo it).
          const bool summed = place_.job.mode == sync_mode::allreduce;
          local_opt_->step(rep_->params(), summed ? rep_->grads() : rep_->fetch_grads(), schedule_.at(time_.clock()));
          rep_->commit_params();
        }))
      return;
    trace_span("update", u0, wall::now());
  } else if (!std::exchange(step_.pushed, false)) {
    push_all(out);
    if (phase_ == member_phase::stopped) return;
  }
  const double waited = seconds_between(step_.params_ready, window_end) - step_.busy;
  trace_span("step", step_.begin, wall::now());
  const std::int64_t samples = reports_loss ? step_.batch : 0;
  meters_.step_done({seconds_between(step_.begin, wall::now()), step_.forward_s, step_.backward_s, samples,
                     reports_loss ? std::optional<double>(loss) : std::nullopt, time_.epoch(), schedule_.at(time_.clock()),
                     time_.clock() + 1, step_.busy, std::max(0.0, waited)});
  time_.step_done(loss, samples);
  maybe_checkpoint(out);
  step_report report{place_.rank, time_.clock(), time_.epoch(), loss, samples, step_.busy, micros(step_.first_action.value_or(window_end)),
                     micros(window_end)};
  report.samples_dropped = pushes_.take_dropped();
  out.push_back(report_step{report});
  if (!close_epoch_if_done(out) || !skip_to_open_round(out)) return;
  start_pulls(out);
}

bool member_core::close_epoch_if_done(member_actions_list& out) {
  if (!time_.epoch_over()) return true;
  const epoch_tally t = time_.close_epoch(steady::now());
  worker_epoch report{place_.rank, t.epoch, t.loss, last_stage() ? t.steps : 0, t.samples, t.seconds, tensor()};
  // The replicas of a ring hold the same bits: replica 0 speaks for them, and every one
  // says which bits it holds (Note [Replicas agree] in core/job_watch.cpp).
  if (local_opt_ && rep_ && replica_ == 0) report.params = rep_->params();
  if (place_.job.mode == sync_mode::allreduce && rep_)
    report.params_fnv1a = fnv1a64(rep_->params().bytes(), rep_->params().nbytes());
  out.push_back(report_epoch{std::move(report)});
  if (time_.job_over()) {
    phase_ = member_phase::finishing;
    maybe_finish(out);
    return false;
  }
  begin_epoch();
  return true;
}

// Note [Backup workers]: the rounds before the open one closed without this member, so
// their batches are skipped (untrained) and the next pull is for the open round.
bool member_core::skip_to_open_round(member_actions_list& out) {
  while (time_.clock() < pushes_.open_round()) {
    time_.skip_step();
    if (!close_epoch_if_done(out)) return false;
  }
  return true;
}

member_actions_list member_core::on_push_ack(std::uint32_t, std::int64_t clock, const kv_push_ack& ack, double seconds) {
  member_actions_list out;
  meters_.push_took(seconds);
  if (pushes_.answered(clock, ack) && last_stage()) pushes_.dropped(samples_.rows_at(clock));
  maybe_finish(out);
  return out;
}

// A refused gradient is counted (once, however many of its pieces were refused) and the
// loop goes on.
member_actions_list member_core::on_push_refused(std::uint32_t s, std::int64_t clock, const std::string& why) {
  member_actions_list out;
  if (pushes_.refused(s, clock)) {
    out.push_back(warn{who() + ": shard " + std::to_string(s) + " refused the gradient of clock " +
                       std::to_string(clock) + ": " + why});
    meters_.push_refused();
  }
  maybe_finish(out);
  return out;
}

void member_core::maybe_finish(member_actions_list& out) {
  if (phase_ != member_phase::finishing || pushes_.pending() > 0) return;
  phase_ = member_phase::stopped;
  out.push_back(finish{worker_done{place_.rank, time_.clock(), pushes_.rejected(), meters_.peak_stored(), pushes_.bytes(),
                                   pushes_.take_dropped()}});
}

}  // namespace troupe
