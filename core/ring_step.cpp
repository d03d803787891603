// ring_step: one step's ring all-reduce of a training member, and its early pieces.
#include "core/ring_step.hpp"

#include <utility>

namespace troupe {

expected<std::vector<ring_piece>> ring_step::start(const ring_spec& spec, tensor_view grads, reduce_op op,
                                                   ring_collective::piece_buffers buffers) {
  auto ring = ring_collective::all_reduce(spec, grads, op);
  if (!ring) return ring.error();
  ring_.emplace(std::move(*ring));
  if (buffers) ring_->set_piece_buffers(std::move(buffers));
  number_ = spec.collective;
  begin_ = wall::now();
  scattered_ = false;
  return ring_->start();
}

std::vector<ring_piece> ring_step::take_early() { return early_.take(number_); }

ring_early::verdict ring_step::hold(ring_piece p, std::uint64_t first, std::size_t most) {
  const std::uint64_t number = p.collective;
  return early_.hold(std::move(p), number, first, 1, most);
}

ring_step::progress ring_step::advance() {
  progress p;
  if (!ring_) return p;
  if (!scattered_ && ring_->scattered()) {
    scattered_ = true;
    mid_ = wall::now();
    p.scattered = phase{.begin = begin_, .end = mid_};
  }
  if (!ring_->done()) return p;
  const auto end = wall::now();
  p.gathered = phase{.begin = mid_, .end = end};
  p.seconds = std::chrono::duration<double>(end - begin_).count();
  ring_.reset();
  return p;
}

tensor_view ring_step::simulated_grads(const tensor& synthetic) {
  if (simulated_.empty()) simulated_ = tensor(synthetic);
  return simulated_.view();
}

}  // namespace troupe
