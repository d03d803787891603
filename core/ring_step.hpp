// ring_step: a training member's ring all-reduce of its step's gradient (--mode
// allreduce, Note [Ring all-reduce of gradients] in core/member_ring.cpp): the collective
// in progress, numbered by the step's clock; the pieces of the next one that came before
// it began (core/ring_early.hpp); and when its phases began and ended, for the trace and
// the metrics. CAF-free; the member's core owns one, starts it once the step's gradient
// is complete, feeds it its previous replica's pieces, and goes on with the step once
// advance() says the collective is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "base/expected.hpp"
#include "core/ring_collective.hpp"
#include "core/ring_early.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

class ring_step {
 public:
  using wall = std::chrono::system_clock;

  // Starts collective `spec.collective`, summing (or reducing by `op`) `grads` in place,
  // its outgoing pieces computed in `buffers` when set (ring_collective::set_piece_buffers):
  // the pieces to send first, or why the spec does not fit the gradient.
  expected<std::vector<ring_piece>> start(const ring_spec& spec, tensor_view grads, reduce_op op,
                                          ring_collective::piece_buffers buffers);
  // The started collective's pieces that came before it began, to be received now.
  std::vector<ring_piece> take_early();
  // Whether a collective is in progress, and whether `p` belongs to it.
  bool running() const { return ring_.has_value(); }
  bool belongs(const ring_piece& p) const { return ring_ && p.collective == number_; }
  // A piece of the collective in progress (belongs(p)).
  ring_collective::outcome receive(ring_piece p) { return ring_->receive(std::move(p)); }
  // A piece of a collective not begun: held until it starts if it is numbered from
  // `first` to one past it and fewer than `most` are held (ring_early::hold).
  ring_early::verdict hold(ring_piece p, std::uint64_t first, std::size_t most);

  // What the collective's progress completed since the last call (after start and after
  // every piece received): the reduce-scatter (its begin and end), and the all-gather,
  // which ends the collective (its begin and end, and the whole collective's seconds).
  struct phase { wall::time_point begin, end; };
  struct progress {
    std::optional<phase> scattered, gathered;
    double seconds = 0.0;
  };
  progress advance();

  // With simulated compute, the buffer a step rings in place of a gradient: `synthetic`'s
  // values at first, then what the last collective left (no one reads them).
  tensor_view simulated_grads(const tensor& synthetic);

 private:
  std::optional<ring_collective> ring_;
  std::uint64_t number_ = 0;
  ring_early early_;
  tensor simulated_;
  wall::time_point begin_, mid_;
  bool scattered_ = false;
};

}  // namespace troupe
