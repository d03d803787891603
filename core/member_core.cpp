// member_core, part 1: building the stage from the welcome, starting (or resuming) the
// loop, the local group, and stopping (member_step.cpp and member_pulls.cpp are the
// loop itself).
#include "core/member_core.hpp"

#include <unistd.h>

#include <algorithm>

#include "base/compute_fault.hpp"
#include "core/job_frames.hpp"
#include "core/job.hpp"
#include "core/job_checkpoint.hpp"
#include "core/pipeline_layout.hpp"
#include "tensor/random.hpp"

namespace troupe {

using namespace member_actions;

std::string_view name_of(member_phase p) {
  switch (p) {
    case member_phase::joining: return "joining";
    case member_phase::wiring: return "wiring";
    case member_phase::grouping: return "grouping";
    case member_phase::training: return "training";
    case member_phase::finishing: return "finishing";
    case member_phase::stopped: return "stopped";
  }
  return "?";
}

std::string member_locality(device d) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return d.kind == device_kind::cuda ? "cuda@" + std::string(host)
                                     : "cpu@" + std::string(host) + ":" + std::to_string(::getpid());
}

member_core::member_core(member_setup setup) : setup_(std::move(setup)) {}
member_core::~member_core() = default;

std::string member_core::who() const {
  if (!pipelined()) return "worker " + std::to_string(place_.rank);
  return "stage " + std::to_string(stage_) + " of replica " + std::to_string(replica_);
}

void member_core::stop(fault why, member_actions_list& out) {
  if (phase_ == member_phase::stopped) return;
  phase_ = member_phase::stopped;
  out.push_back(member_actions::stop{std::move(why)});
}

member_actions_list member_core::on_welcome(const member_assignment& a) {
  member_actions_list out;
  if (phase_ != member_phase::joining) return out;
  std::optional<fault> f;
  if (auto thrown = catch_compute("member " + std::to_string(a.rank) + ": building its stage", [&] { f = build(a); }))
    f = std::move(thrown);
  if (f) {
    stop(std::move(*f), out);
    return out;
  }
  out.push_back(member_actions::bound_frames{frame_bytes_});
  restore_residuals(out);
  phase_ = member_phase::wiring;
  return out;
}

std::optional<fault> member_core::build(const member_assignment& a) {
  place_ = a;
  const job_spec& job = place_.job;
  replica_ = a.rank / job.pipeline_stages;
  stage_ = a.rank % job.pipeline_stages;
  if (job.mode == sync_mode::allreduce) seat_ = seat_in(a.ring, replica_);
  time_ = epoch_clock(steps_per_epoch(job), job.train.epochs, a.resume_clock);
  samples_ = member_samples(job, replica_, a.world);
  schedule_ = job_schedule(job);
  meters_ = member_meters(
      setup_.obs, a.rank,
      pipelined() ? "replica " + std::to_string(replica_) + " stage " + std::to_string(stage_)
                  : "worker " + std::to_string(a.rank),
      pipelined() ? std::optional<member_meters::stage_place>({replica_, stage_}) : std::nullopt);
  auto full = build_model(job);
  if (!full) return fault{errc::bad_job, full.error().message};
  frame_bytes_ = max_frame_bytes(job, *full);
  const auto spans = job_stage_spans(job, *full);
  if (spans.size() != job.pipeline_stages)
    return fault{errc::bad_job, "the job's cut points do not make " + std::to_string(job.pipeline_stages) + " stages"};
  const stage_span& span = spans[stage_];
  param_offset_ = span.param_offset;
  checkpoint_id_ = identity_of(job, full->num_params());
  checkpoints_ = checkpoint_steps(job.checkpoints.every, steps_per_epoch(job));
  checkpoints_.taken(a.resume_clock);
  net_ = pipelined() ? full->stage(span.first_layer, span.last_layer) : *full;
  acts_in_.emplace(job, net_->input_shape(), "activation");
  grads_in_.emplace(job, net_->output_shape(), "activation gradient");
  lay_out_shards(a.table, span);
  if (job.servers == 0) local_opt_.emplace(job.train.optimizer, net_->num_params());
  if (simulated()) {
    // A fixed, small, finite gradient: enough for the shards to do their real work.
    synthetic_grad_ = tensor({net_->num_params()});
    rng r(derive_seed(job.train.seed, {0x51, a.rank}));
    float* g = synthetic_grad_.data<float>();
    for (std::int64_t i = 0; i < net_->num_params(); ++i) g[i] = 1e-4f * r.normal();
    return std::nullopt;
  }
  if (first_stage() || last_stage())
    if (auto f = data_.take(job, setup_.data, who())) return f;
  // Granted rows add up to max_extra_rows to a step (Note [Dealing a lost worker's samples]).
  const std::int64_t rows = job.train.batch_size + deal_shape_of(job).max_extra_rows;
  const std::int64_t max_rows = (rows + job.microbatches - 1) / job.microbatches;
  const auto plan = stage_actions(job.schedule, static_cast<int>(job.pipeline_stages), static_cast<int>(stage_),
                                  microbatches_for(job, job.train.batch_size));
  if (auto f = open_device(max_rows, peak_stored(plan))) return f;
  return restore_checkpoint();
}

// This stage's part of every shard's slice (the ranges it pushes and pulls, in buffer
// order), the shards it talks to, its 2-bit residuals, and its gradient buckets' pieces.
void member_core::lay_out_shards(const key_table& table, const stage_span& span) {
  const job_spec& job = place_.job;
  // Buckets need real backward layers and pushes of this member's own gradient; a local
  // group's leader talks to the shards for the group.
  const bool bucketable = !simulated() && !grouped() && job.servers > 0;
  slices_ = member_slices(table, span, *net_, bucketable ? job.bucket_bytes : 0, !grouped() || group_leader());
  // 2-bit pushes keep what they did not send (Note [2-bit gradients]).
  std::vector<std::int64_t> residual_numel(table.shards(), 0);
  if (job.compression.kind == codec_kind::two_bit)
    for (std::uint32_t s = 0; s < table.shards(); ++s) residual_numel[s] = slices_.numel(s);
  pushes_ = push_ledger(residual_numel);
  pulls_ = pull_round(slices_, job.pull_precision.kind == codec_kind::two_bit);
}

// The stage's compute: its device (or the CPU backend, for a local group's collectives),
// the replica with its buffers, the local optimizer's initial parameters, the data buffers.
std::optional<fault> member_core::open_device(std::int64_t max_rows, int slots) {
  if (auto f = device_.open(setup_.compute, place_.rank, grouped(), who())) return f;
  if (auto d = device_.off_host()) meters_.on_device(setup_.obs, place_.rank, to_string(*d));
  return catch_compute(who() + ": allocating its stage", [&] {
    rep_ = std::make_unique<stage_replica>(*net_, first_stage(), last_stage(), max_rows, slots, device_.exec());
    if (local_opt_) {
      net_->init_params(rep_->params(), place_.job.train.seed, place_.job.train.init);
      rep_->commit_params();
    }
    if (data_.taken()) data_.allocate(max_rows);
  });
}

member_actions_list member_core::on_wired() {
  member_actions_list out;
  if (phase_ != member_phase::wiring) return out;
  start_training(out);
  return out;
}

// Starts (or, for a member that replaces a dead one, resumes) the loop at its clock.
void member_core::start_training(member_actions_list& out) {
  if (grouped() && !device_.in_group()) {
    phase_ = member_phase::grouping;
    open_group(out);  // comes back here once the group's communicator is open
    return;
  }
  phase_ = member_phase::training;
  if (!time_.start(steady::now())) {
    phase_ = member_phase::finishing;
    maybe_finish(out);
    return;
  }
  begin_epoch();
  start_pulls(out);
}

// Opens this member's communicator: the leader makes the id and sends it through the
// coordinator; the others wait for it (at most --request-timeout). Opening blocks until
// every member has opened, or fails at the timeout, so the leader opens only on its next
// call, after the shell has sent the id.
void member_core::open_group(member_actions_list& out) {
  if (group_leader() && !group_id_) {
    try {
      group_id_ = device_.new_group_id();
    } catch (const std::exception& e) {
      stop({errc::stage_lost, who() + ": cannot make its local group's id: " + e.what()}, out);
      return;
    }
    out.push_back(send_group_id{group_id{place_.rank, *group_id_}});
    out.push_back(schedule_step{});  // opens from the mailbox, once the id is on its way
    return;
  }
  if (!group_id_) {
    out.push_back(await_group_id{});
    return;
  }
  const auto index = std::find(place_.group.begin(), place_.group.end(), place_.rank) - place_.group.begin();
  try {
    device_.join_group(*group_id_, static_cast<int>(place_.group.size()), static_cast<int>(index),
                       std::chrono::milliseconds(place_.job.request_timeout_ms));
  } catch (const std::exception& e) {
    stop({errc::stage_lost, who() + ": its local group did not form: " + e.what()}, out);
    return;
  }
  start_training(out);
}

member_actions_list member_core::on_group_id(std::vector<std::uint8_t> id) {
  member_actions_list out;
  if (group_id_ || id.empty() || phase_ == member_phase::stopped) return out;
  group_id_ = std::move(id);
  if (phase_ == member_phase::grouping) open_group(out);
  return out;
}

member_actions_list member_core::on_group_deadline() {
  member_actions_list out;
  if (phase_ == member_phase::grouping && !group_id_)
    stop({errc::stage_lost, who() + " never received its local group's id from worker " +
                                std::to_string(place_.group.empty() ? 0 : place_.group.front()) +
                                " within --request-timeout"},
         out);
  return out;
}

// Note [A pipeline neighbour gone in the last step]
// A stage takes activations from its previous stage (for its forwards) and activation
// gradients from its next stage (for its backwards), and nothing else. In the job's last
// step, once every forward (or backward) it has left has its input here, that neighbour
// owes it nothing more; and once it finishes (its last pushes answered) no neighbour
// does. A neighbour that finished its own part and left then may have its connection
// close before its normal exit is heard (Note [The role's last words] in
// net/node_system.cpp), and must not fail a stage that needs nothing more from it: it is
// told and ignored, and the stage finishes. If the neighbour died instead, the
// coordinator sees that member die and handles the job (a restart, or its end), so
// nothing waits forever. A neighbour gone earlier, or while it still owes a tensor, stops
// the stage as before: its pipeline cannot finish the step. As the ring's rule (Note [A
// next replica gone in the last step] in core/member_ring.cpp).
bool member_core::neighbour_owes_more(bool previous) const {
  if (phase_ == member_phase::finishing) return false;
  const bool last_step = phase_ == member_phase::training && time_.in_last_step();
  if (!last_step || step_.clock != time_.clock()) return true;
  const std::optional<stage_inbox>& inbox = previous ? acts_in_ : grads_in_;
  for (std::size_t i = step_.next; i < step_.actions.size(); ++i) {
    const pipeline_action a = step_.actions[i];
    if (a.forward != previous) continue;  // forwards take from the previous stage, backwards from the next
    if (!inbox || !inbox->holds(time_.clock(), a.microbatch)) return true;
  }
  return false;
}

member_actions_list member_core::on_neighbour_down(bool previous, const std::string& why) {
  member_actions_list out;
  const std::string neighbour =
      "stage " + std::to_string(previous ? stage_ - 1 : stage_ + 1) + " of replica " + std::to_string(replica_);
  if (!neighbour_owes_more(previous)) {
    out.push_back(warn{neighbour + " is gone (" + why + ") during the job's last step; " + who() +
                       " needs nothing more from it and finishes"});
    return out;
  }
  stop({errc::stage_lost,
        neighbour + " is gone (" + why + "); " + who() + " stops, since its pipeline cannot finish a step without it"},
       out);
  return out;
}

}  // namespace troupe
