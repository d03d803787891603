// group_comm: one member's communicator in a local group, on a backend with collectives
// (NCCL in the CUDA module, host_collective in the CPU backend). Opening waits for every
// member; every call fails with backend_error, never hangs, after the timeout (a member
// that died), and the communicator is closed when this object goes.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "tensor/backend.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

class group_comm {
 public:
  // A fresh id for a group; the leader makes it and the others receive it.
  static std::vector<std::uint8_t> new_id(const backend_context& b);

  group_comm(const backend_context& b, const std::vector<std::uint8_t>& id, int ranks, int rank,
             std::chrono::milliseconds timeout);
  ~group_comm();
  group_comm(const group_comm&) = delete;
  group_comm& operator=(const group_comm&) = delete;

  // Sums each buffer (in b's memory, f32, contiguous) across the group, in place.
  void all_reduce_sum(const std::vector<tensor_view>& buffers);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }

 private:
  const backend_context& b_;
  void* comm_ = nullptr;
  int ranks_, rank_;
};

}  // namespace troupe
