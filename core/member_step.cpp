// member_core, part 2: the training loop: the schedule's forwards and backwards (the
// pulls before them are member_pulls.cpp's), push (or the local update), the step and
// epoch reports, and finishing.
#include <algorithm>
#include <cmath>
#include <thread>

#include "core/job.hpp"
#include "core/member_core.hpp"
#include "tensor/random.hpp"

namespace troupe {

using namespace member_actions;

// name: a literal. Forward and backward spans carry their step and microbatch.
void member_core::trace_span(const char* name, wall::time_point begin, wall::time_point end, std::int32_t microbatch) {
  meters_.span(name, begin, end, microbatch >= 0 ? time_.clock() : -1, microbatch);
}

void member_core::begin_epoch() {
  samples_.begin_epoch(data_.train_size(), time_.epoch(), time_.clock());
}

// Sleeps for this stage's share of the simulated compute of the action (forward one
// third, backward two thirds of simulate_compute_ms per --batch-size rows, in proportion
// to the step's rows), slowed if this is the slow member.
void member_core::simulate(bool forward) const {
  const job_spec& job = place_.job;
  const double factor = static_cast<std::int32_t>(place_.rank) == job.slow_worker ? job.slow_factor : 1.0;
  const double rows =
      static_cast<double>(step_.batch) / static_cast<double>(std::max<std::int64_t>(1, job.train.batch_size));
  const double share = rows * (forward ? 1.0 : 2.0) / (3.0 * step_.parts);
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(job.simulate_compute_ms * share * factor));
}

// The slow member repeats (factor - 1) times the time real compute took.
void member_core::slow_down(steady::duration took) const {
  const job_spec& job = place_.job;
  if (static_cast<std::int32_t>(place_.rank) != job.slow_worker || job.slow_factor <= 1.0) return;
  std::this_thread::sleep_for(took * (job.slow_factor - 1.0));
}

member_actions_list member_core::on_rows_granted(rows_grant g) {
  const std::uint64_t id = g.id;
  const bool open =
      (phase_ == member_phase::training || phase_ == member_phase::wiring || phase_ == member_phase::grouping) &&
      deals_samples(place_.job) && g.epoch < place_.job.train.epochs;
  const bool taken = open && samples_.take_grant(std::move(g), time_.clock());
  return {answer_rows{rows_answer{place_.rank, id, taken}}};
}

member_actions_list member_core::on_rows_shed(const rows_shed& s) {
  const bool open =
      (phase_ == member_phase::training || phase_ == member_phase::wiring || phase_ == member_phase::grouping) &&
      deals_samples(place_.job) && s.keep >= 1 && s.keep <= place_.job.train.batch_size;
  if (!open) return {answer_rows{rows_answer{place_.rank, s.id, false}}};
  // The step at the clock may have begun (its rows are chosen): from the one after.
  const std::int64_t from = std::max(time_.clock() + 1, s.not_before);
  samples_.keep_from(from, s.keep);
  return {answer_rows{rows_answer{place_.rank, s.id, true, from}}};
}

member_actions_list member_core::on_next_step() {
  member_actions_list out;
  if (phase_ == member_phase::grouping) {
    open_group(out);
    return out;
  }
  if (phase_ != member_phase::training || step_.running) return out;
  // A local group's members take their leader's pull (in --mode allreduce each updates its own).
  if (grouped() && place_.job.mode != sync_mode::allreduce &&
      !in_group("parameter broadcast", out, [&] { rep_->share_params(device_.group(), false); }))
    return out;
  begin_step(out);
  return out;
}

// The parameters are fresh: plan the minibatch's actions and run what can run.
void member_core::begin_step(member_actions_list& out) {
  const job_spec& job = place_.job;
  const std::int64_t batch = samples_.plan_step(time_.step_in_epoch(), time_.clock());
  const int parts = microbatches_for(job, batch);
  step_.start(time_.clock(), batch, parts,
              stage_actions(job.schedule, static_cast<int>(job.pipeline_stages), static_cast<int>(stage_), parts),
              wall::now());
  if (rep_ && !guarded("zeroing its gradients", out, [&] { rep_->zero_grads(); })) return;
  run_actions(out);
}

// Note [Stage tensors leave at once]
// An activation or activation gradient must reach its neighbour as soon as it exists,
// not after the stage's next actions: under GPipe stage 0 runs all M forwards back to
// back, and holding the tensors until then would serialise the pipeline. So after an
// action that produced one, the core returns with `resume` last; the shell sends what
// came before and calls on_resume() at once, and the core goes on where it stopped.
void member_core::run_actions(member_actions_list& out) {
  while (step_.has_action() && phase_ == member_phase::training) {
    const pipeline_action a = step_.action();
    const action_result r = a.forward ? try_forward(a.microbatch, out) : try_backward(a.microbatch, out);
    if (r == action_result::waiting) return;
    if (r == action_result::paused) {
      out.push_back(resume{});
      return;
    }
    ++step_.next;
    if (r == action_result::sent && step_.has_action()) {
      out.push_back(resume{});
      return;
    }
  }
  if (step_.running && phase_ == member_phase::training) end_step(out);
}

member_actions_list member_core::on_resume() {
  member_actions_list out;
  run_actions(out);
  return out;
}

// Runs the forward of microbatch mb if its input is here. While layer-by-layer pulls are
// still arriving only the step's first forward runs, on the layers whose parameters are
// here, and it goes on as the others arrive.
member_core::action_result member_core::try_forward(int mb, member_actions_list& out) {
  const int ready = pulls_.layers_ready(slices_, net_->num_layers());
  const int layers = net_->num_layers();
  if (ready < layers && step_.next > 0) return action_result::waiting;
  tensor received;
  if (!first_stage() && !step_.forward_open) {
    auto t = acts_in_->take(time_.clock(), mb);
    if (!t) return action_result::waiting;
    received = std::move(*t);
  }
  const std::int64_t begin = microbatch_begin(step_.batch, step_.parts, mb), rows = microbatch_rows(step_.batch, step_.parts, mb);
  const auto t0 = wall::now();
  const auto c0 = steady::now();
  if (!step_.first_action) step_.first_action = t0;
  if (!step_.forward_open) step_.forward_begin = t0;
  tensor out_msg;
  bool finished = true;
  if (simulated()) {
    simulate(true);
    if (!last_stage()) out_msg = tensor(net_->output_shape().prepend(rows));
  } else if (!guarded("forward of microbatch " + std::to_string(mb), out, [&] {
               if (!step_.forward_open) {
                 if (data_.taken())
                   data_.gather(samples_.indices(begin, rows), first_stage(), place_.job.train.seed, time_.epoch());
                 const_tensor_view input =
                     first_stage() ? const_tensor_view(data_.inputs(rows)) : received.view();
                 // Note [Dropout seeds]: this step's microbatch of this replica.
                 const std::uint64_t seed =
                     derive_seed(place_.job.train.seed,
                                 {static_cast<std::uint64_t>(time_.clock()), replica_, static_cast<std::uint64_t>(mb)});
                 step_.slot_of[mb] = rep_->begin_forward(input, seed);  // copies the input
                 step_.forward_open = true;
               }
               rep_->forward_up_to(ready);
               finished = ready == layers;
               if (!finished) return;
               rep_->end_forward();
               step_.forward_open = false;
               const int slot = step_.slot_of[mb];
               if (last_stage())
                 step_.loss += rep_->loss(slot, data_.labels(rows), 1.0f / static_cast<float>(samples_.scale_rows())) *
                               static_cast<double>(rows) / static_cast<double>(step_.batch);
               else
                 out_msg = rep_->output_on_host(slot);
             })) {
    return action_result::waiting;
  } else {
    slow_down(steady::now() - c0);
  }
  const auto t1 = wall::now();
  step_.computed(true, t0, t1);
  if (!finished) return action_result::waiting;  // goes on when more parameters arrive
  meters_.stored(+1);
  trace_span("forward", step_.forward_begin, t1, mb);
  if (last_stage()) return action_result::done;
  out.push_back(send_activation{activation{replica_, stage_, time_.clock(), mb, std::move(out_msg)}});
  return action_result::sent;
}

// Runs the backward of microbatch mb if its output gradient is here.
member_core::action_result member_core::try_backward(int mb, member_actions_list& out) {
  if (buckets_on() && step_.at_last_action()) return try_backward_in_buckets(mb, out);
  tensor received;
  if (!last_stage()) {
    auto t = grads_in_->take(time_.clock(), mb);
    if (!t) return action_result::waiting;
    received = std::move(*t);
  }
  const std::int64_t rows = microbatch_rows(step_.batch, step_.parts, mb);
  const auto t0 = wall::now();
  const auto c0 = steady::now();
  tensor out_msg;
  if (simulated()) {
    simulate(false);
    if (!first_stage()) out_msg = tensor(net_->input_shape().prepend(rows));
  } else if (!guarded("backward of microbatch " + std::to_string(mb), out, [&] {
               const_tensor_view gin =
                   rep_->backward(step_.slot_of[mb], received.empty() ? const_tensor_view() : received.view());
               if (!first_stage()) {
                 out_msg = tensor::uninitialized(gin.sizes());
                 copy(out_msg, gin);
               }
             })) {
    return action_result::waiting;
  } else {
    slow_down(steady::now() - c0);
  }
  const auto t1 = wall::now();
  step_.computed(false, t0, t1);
  return backward_done(mb, t0, std::move(out_msg), out);
}

// The backward of microbatch mb (begun at `begin`) is done: its slot is free, and its
// activation gradient `grad_in` goes to the previous stage.
member_core::action_result member_core::backward_done(int mb, wall::time_point begin, tensor grad_in,
                                                      member_actions_list& out) {
  meters_.stored(-1);
  meters_.microbatch_done();
  trace_span("backward", begin, wall::now(), mb);
  if (first_stage()) return action_result::done;
  out.push_back(send_activation_grad{activation_grad{replica_, stage_, time_.clock(), mb, std::move(grad_in)}});
  return action_result::sent;
}

// The step's last backward with gradient buckets (Note [Gradient buckets]): computes the
// layers of the next bucket, pushes its pieces, and pauses so that the shell sends them
// before the layers below are computed.
member_core::action_result member_core::try_backward_in_buckets(int mb, member_actions_list& out) {
  const std::string op = "backward of microbatch " + std::to_string(mb);
  if (step_.bucket_next == 0) {
    if (!last_stage()) {
      auto t = grads_in_->take(time_.clock(), mb);
      if (!t) return action_result::waiting;
      step_.backward_in = std::move(*t);
    }
    // Every forward has run: the loss is known before anything leaves.
    if (!loss_is_finite(out)) return action_result::waiting;
    step_.backward_begin = wall::now();
    if (!guarded(op, out, [&] {
          rep_->begin_backward(step_.slot_of[mb], step_.backward_in.empty() ? const_tensor_view() : step_.backward_in.view());
        }))
      return action_result::waiting;
  }
  const auto t0 = wall::now();
  const auto c0 = steady::now();
  if (!guarded(op, out, [&] { rep_->backward_down_to(slices_.buckets()[step_.bucket_next].bottom_layer); }))
    return action_result::waiting;
  slow_down(steady::now() - c0);
  const auto t1 = wall::now();
  step_.computed(false, t0, t1);
  push_bucket(step_.bucket_next, out);
  if (phase_ == member_phase::stopped) return action_result::waiting;
  if (++step_.bucket_next < slices_.buckets().size()) return action_result::paused;
  step_.bucket_next = 0;
  step_.pushed = true;
  tensor out_msg;
  if (!guarded(op, out, [&] {
        const_tensor_view gin = rep_->end_backward();
        if (!first_stage()) {
          out_msg = tensor::uninitialized(gin.sizes());
          copy(out_msg, gin);
        }
      }))
    return action_result::waiting;
  step_.backward_in = tensor();
  return backward_done(mb, step_.backward_begin, std::move(out_msg), out);
}

// Files an activation or activation gradient for its action, or stops the member with
// why it is refused (the checks in stage_inbox.hpp): the pipeline cannot go on without
// the right tensor. One from anyone but the neighbour is dropped with a warning.
template <class Message>
void member_core::on_stage_tensor(Message& msg, bool forward, bool from_neighbour, const std::string& sender,
                                  member_actions_list& out) {
  if (phase_ == member_phase::stopped) return;
  const std::uint32_t expected_stage = forward ? stage_ - 1 : stage_ + 1;
  const bool before_training = phase_ == member_phase::joining || phase_ == member_phase::wiring;
  const bool no_such_neighbour = forward ? first_stage() : last_stage();
  if (!from_neighbour || before_training || no_such_neighbour || msg.replica != replica_ ||
      msg.stage != expected_stage) {
    out.push_back(warn{who() + ": dropped an " + (forward ? "activation" : "activation gradient") + " from " + sender +
                       " claiming stage " + std::to_string(msg.stage) + " of replica " + std::to_string(msg.replica) +
                       ": not this stage's neighbour"});
    return;
  }
  auto& box = forward ? *acts_in_ : *grads_in_;
  if (auto refused = box.file(time_.clock(), time_.step_in_epoch(), msg.step, msg.microbatch, std::move(msg.data))) {
    stop({refused->code, who() + " got " + refused->detail + " from stage " + std::to_string(msg.stage)}, out);
    return;
  }
  run_actions(out);
}

member_actions_list member_core::on_activation(activation a, bool from_neighbour, const std::string& sender) {
  member_actions_list out;
  on_stage_tensor(a, true, from_neighbour, sender, out);
  return out;
}

member_actions_list member_core::on_activation_grad(activation_grad g, bool from_neighbour, const std::string& sender) {
  member_actions_list out;
  on_stage_tensor(g, false, from_neighbour, sender, out);
  return out;
}

}  // namespace troupe
