// member_momenta: the `dana` async rule's state for one part of a shard: each member's own
// SGD velocity, and the equal shares of a summed velocity that members start from.
//
// Note [Momentum per member]
// In sync, one velocity sums the round's gradients, so momentum spans rounds. Async and ssp
// apply each member's push on arrival; with one shared velocity, momentum spans pushes of
// different members, each computed on parameters about N - 1 updates old. That delay is
// what cost asynchronous training its accuracy: a stale gradient under momentum is stable
// only at a far smaller step than a fresh one.
//
// The `dana` rule follows DANA (Hakimi et al., "Taming Momentum in a Distributed
// Asynchronous Environment", 2019):
// - Each member keeps its own velocity on the shard, v_i = mu v_i + g_i. Its momentum then
//   spans that member's own steps, as a sync round's spans rounds, so the script's momentum
//   means what it means in sync and the momentum rule's lowering is not needed.
// - A pull answers the parameters where they will be when the member's next gradient
//   arrives. By then every other member has pushed about once, and in the steady state each
//   push moves the parameters by lr v_j; so the shard stores theta - lr sum_j v_j rather
//   than theta, and a push updates that look-ahead:
//     v_i' = mu v_i + g_i;  stored -= lr (2 v_i' - v_i)
//   (the parameters moved by lr v_i', the look-ahead term by lr (v_i' - v_i)). DANA itself
//   looks ahead by mu sum_j v_j, which counts only the momentum part of the others' next
//   pushes; looking ahead by the whole velocity closed more of the gap to sync on the
//   measured user's model (docs/benchmarks.md, pytorch_through_troupe). Pulls are not
//   changed: every transport answers the stored values as before.
// - Each push is its member's share of a round: a built-in member pushes its whole
//   gradient, so the shard steps by lr / N (N live pushers), and the N pushes of a round
//   move the parameters as one sync step on their mean does. A key-value job's pushes
//   already carry the share (troupe.torch's DistributedOptimizer divides by the workers),
//   so its lr is taken as sent. Without the 1 / N the look-ahead spans N whole steps, and
//   the built-in MLP diverged at 8 workers.
// - With one live pusher nothing is stale, and the shard applies plain SGD with slot 0 as
//   the velocity, so one worker trains as one PyTorch process does (and a key-value job's
//   plain SGD, momentum 0, is left as the program set it). When more pushers come, they
//   start from equal shares of that velocity.
// A checkpoint keeps the sum of the velocities in the optimizer's slot 0, as it keeps a
// shared velocity, so the files do not change. The sum is formed when it is read (a
// checkpoint image, or one pusher left alone), not kept on each push: keeping it cost a
// fourth stream over the part on every update. After a restore each member's first push
// takes an equal share of that sum, 1 / (live pushers), as its own velocity. A member that
// leaves takes its velocity with it. The cost: one copy of the part per member, as
// DC-ASGD's. SGD only; Adam is left alone.
#pragma once

#include <cstdint>
#include <map>

#include "tensor/optimizer.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

class member_momenta {
 public:
  // Applies member's gradient to `params` with its own velocity through `opt` (SGD on the
  // host); pushers: the live members that push the part now (for a restored sum's share).
  void step(optimizer_state& opt, std::uint32_t member, tensor_view params, const_tensor_view grad, float lr,
            std::uint32_t pushers);
  // The member left or joined afresh: its velocity leaves the sum.
  void forget(std::uint32_t member);
  // Slot 0 is the sum (a restore wrote it): the members' velocities start afresh from
  // equal shares of it at their next first pushes.
  void start_from_slot();
  // The part has one live pusher: the shard applies plain SGD with slot 0 as its velocity
  // (the sum of one), so the sum is written there once and the copies here are dropped,
  // until more pushers come and take shares of it.
  void alone(optimizer_state& opt);
  // A new optimizer: every velocity starts at zero.
  void clear();
  // The sum of the velocities, as a checkpoint keeps it in slot 0 of `opt`.
  tensor sum(const optimizer_state& opt) const;

 private:
  std::map<std::uint32_t, tensor> velocity_;
  bool slot_is_sum_ = true;         // no member has stepped its own velocity since slot 0 was the sum
  bool sharing_ = false;            // the next first pushes take shares of slot 0
  tensor shared_sum_;               // slot 0 as the first of them found it; else empty
  tensor unclaimed_;                // what of shared_sum_ the members have not taken yet
  std::uint32_t shares_taken_ = 0;  // members that took their share of it
};

}  // namespace troupe
