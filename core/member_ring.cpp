// member_core, part 4: --mode allreduce, the step's gradient summed round a ring of the
// replicas (Note [Ring all-reduce of gradients]).
#include <utility>

#include "core/job.hpp"
#include "core/member_core.hpp"

namespace troupe {

using namespace member_actions;

// Note [Ring all-reduce of gradients]
// With --mode allreduce there are no shard servers: every replica holds the parameters
// and the optimizer state, initialised from the job's seed, so all start with the same
// bits. At the end of each step the stage's gradient (every layer's, one flat buffer: the
// fusion buffer is the gradient itself) goes into a ring all-reduce (Note [The ring] in
// core/ring_collective.hpp) among the same stage of every replica (with --local-reduce,
// of every local group's leader: Note [Rings of leaders] in core/ring_seats.cpp),
// numbered by the step's clock; once it is done every replica holds the same sum (or
// average) and applies the same optimizer step, so the replicas stay bitwise equal, and
// a run gives the same bits every time. The sum is what a sync round applies, so the lr
// and its scaling mean what they mean in sync.
//
// A replica can be at most one collective ahead of its right neighbour: it cannot finish
// collective c before every replica has put its values into it. So pieces arrive for the
// collective in progress, or for the next one (a neighbour that finished first and
// computed its next step), which wait here until this replica starts it; a piece for any
// other collective, or more pieces than one collective has, is a broken neighbour and
// stops the member with the piece's fault, as a refused piece does. A replica next to
// this one that dies stops it with stage_lost, naming the dead one (but for a next
// replica gone in the last step: Note [A next replica gone in the last step]), and the
// coordinator ends the job when it sees any replica die, so no survivor waits for pieces
// that will never come.

std::uint32_t member_core::previous_replica() const { return seat_->prev; }
std::uint32_t member_core::next_replica() const { return seat_->next; }
std::uint32_t member_core::ring_next() const { return seat_->next * place_.job.pipeline_stages + stage_; }

std::string member_core::replica_name(std::uint32_t replica) const {
  if (!pipelined()) return "worker " + std::to_string(replica);
  return "stage " + std::to_string(stage_) + " of replica " + std::to_string(replica);
}

void member_core::start_ring(member_actions_list& out) {
  tensor_view grads;
  if (simulated()) {
    // A host step rings the gradient where backward left it, with no copy; so a simulated
    // one rings the same buffer every step, which starts as the synthetic gradient and
    // then holds the last step's result (simulated compute applies no update, so no one
    // reads it; the ring costs the same whatever the values).
    grads = ring_.simulated_grads(synthetic_grad_);
  } else if (!guarded("downloading its gradients", out, [&] {
               rep_->fetch_grads();
               grads = rep_->grads().view();
             })) {
    return;
  }
  const ring_spec spec{seat_->size, seat_->index, static_cast<std::uint64_t>(time_.clock()), place_.job.ring_piece_elems};
  // A local group's leader rings the group's sum: the average is taken over every worker
  // once the ring is done (take_leaders_sum).
  ring_collective::piece_buffers buffers;
  if (setup_.ring) buffers = [link = setup_.ring](std::int64_t numel) { return link->piece_buffer(numel); };
  auto first = ring_.start(spec, grads, grouped() ? reduce_op::sum : place_.job.ring_op, std::move(buffers));
  if (!first) {
    stop({errc::bad_job, who() + ": " + first.error().message}, out);
    return;
  }
  for (ring_piece& p : *first) send_piece(std::move(p), out);
  for (ring_piece& p : ring_.take_early()) {
    take_ring_piece(std::move(p), out);
    if (phase_ == member_phase::stopped) return;
  }
  ring_progress(out);
}

void member_core::send_piece(ring_piece p, member_actions_list& out) {
  meters_.ring_bytes_sent(p.values.nbytes());
  out.push_back(send_ring_piece{std::move(p)});
}

member_actions_list member_core::on_ring_piece(ring_piece p, bool from_neighbour, const std::string& sender) {
  member_actions_list out;
  if (!ringed() || phase_ != member_phase::training) {
    if (phase_ != member_phase::stopped)
      out.push_back(warn{who() + ": dropped a ring piece from " + sender + ": this member is not in a ring now"});
    return out;
  }
  if (!from_neighbour) {
    out.push_back(warn{who() + ": dropped a ring piece from " + sender + ", which is not " +
                       replica_name(previous_replica())});
    return out;
  }
  take_ring_piece(std::move(p), out);
  if (phase_ != member_phase::stopped && ring_.running()) ring_progress(out);
  return out;
}

// A piece from the previous replica: applied to the collective in progress, or held for
// the next one.
void member_core::take_ring_piece(ring_piece p, member_actions_list& out) {
  const std::uint64_t current = static_cast<std::uint64_t>(time_.clock());
  if (ring_.belongs(p)) {
    const auto bytes = p.values.nbytes();
    auto o = ring_.receive(std::move(p));
    if (o.refused) {
      stop(std::move(*o.refused), out);
      return;
    }
    meters_.ring_bytes_received(bytes);
    for (ring_piece& q : o.send) send_piece(std::move(q), out);
    return;
  }
  // The next step's pieces only, and of one collective at most: two per piece of the
  // gradient, and one per chunk more.
  const std::int64_t numel = net_ ? net_->num_params() : 0;
  const auto most = static_cast<std::size_t>(2 * (numel / place_.job.ring_piece_elems + place_.job.workers + 1));
  const std::uint64_t number = p.collective;
  const auto v = ring_.hold(std::move(p), ring_.running() ? current + 1 : current, most);
  if (v == ring_early::verdict::held) return;
  stop({errc::bad_clock, who() + ": " + replica_name(previous_replica()) + " sent a ring piece of step " +
                             std::to_string(number) + " at step " + std::to_string(time_.clock()) +
                             (v == ring_early::verdict::too_many ? " (more pieces than a step has)" : "")},
       out);
}

// Traces the ring's phases, and once it is done goes on with the step.
void member_core::ring_progress(member_actions_list& out) {
  const ring_step::progress p = ring_.advance();
  if (p.scattered) trace_span("reduce-scatter", p.scattered->begin, p.scattered->end);
  if (!p.gathered) return;
  trace_span("all-gather", p.gathered->begin, p.gathered->end);
  meters_.allreduce_took(p.seconds);
  if (!take_leaders_sum(out)) return;
  update_and_report(out);
}

// Note [A next replica gone in the last step]
// A replica receives only from its previous replica, so once it is in the job's last
// step, its next replica has nothing more to give it: one that finished that step first
// and left (whose connection may close before its normal exit is heard: Note [The role's
// last words] in net/node_system.cpp) must not fail it. So a next replica gone in the last step
// is told and ignored, and this replica finishes from what its previous one sends. If
// the next one died instead, its own previous replica stops, that stop reaches this one
// as its previous replica's down, and the coordinator ends the job: nothing waits
// forever. Earlier steps need the next replica for the steps to come, and stop as before.
member_actions_list member_core::on_ring_neighbour_down(bool previous, const std::string& why) {
  member_actions_list out;
  const std::uint32_t other = previous ? previous_replica() : next_replica();
  const bool last_step = phase_ == member_phase::training && time_.in_last_step();
  if (!previous && last_step) {
    out.push_back(warn{replica_name(other) + " is gone (" + why + ") during the job's last step; " + who() +
                       " needs nothing more from it and finishes"});
    return out;
  }
  stop({errc::stage_lost, replica_name(other) + " is gone (" + why + "); " + who() +
                              " stops, since the ring all-reduce of its gradients cannot finish without it"},
       out);
  return out;
}

}  // namespace troupe
