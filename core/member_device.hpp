// member_device: where a member computes: the host, or a backend context on its device
// (or the CPU backend's, which a local group's collectives need), the compute every op of
// its stage goes through, and its local group's communicator once the group has formed
// (Note [Local groups] in core/local_groups.hpp). CAF-free; the member's core
// (core/member_core.hpp) owns it and decides when the group opens.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/errc.hpp"
#include "tensor/backend.hpp"
#include "tensor/compute.hpp"
#include "tensor/dtype.hpp"
#include "tensor/gemm.hpp"
#include "tensor/group_comm.hpp"

namespace troupe {

// Where and how a member computes.
struct compute_options {
  // Each member opens its own context on this device (a context is one stream and is not
  // shared between threads); a device that cannot be opened fails the member with the
  // backend's reason.
  device where = cpu_device;
  // `--device cuda` without an index in one process: member r takes cuda:(r mod the
  // number of devices), so the workers of a job spread over the machine's GPUs.
  bool spread_over_devices = false;
  bool tf32 = false;  // TF32 tensor-core math on CUDA
  // The products of weights and activations (`--precision`); bf16 needs the CPU, and a
  // member on a device asked for it fails with bad_job.
  precision products = precision::fp32;
};

class member_device {
 public:
  // Opens where member `rank` computes. grouped: it has a local group, whose collectives
  // need a backend context even on the host. A device that cannot be opened, or a
  // --precision it cannot compute, is a bad_job fault naming the member as `who`; a
  // backend call that throws, a compute_failed one.
  std::optional<fault> open(const compute_options& c, std::uint32_t rank, bool grouped, const std::string& who);
  compute& exec() { return exec_; }
  // The device it opened when it is not the host (the metrics name it, and it reports
  // its memory), or nothing.
  std::optional<device> off_host() const { return off_host_; }
  troupe_memory_stats memory() const { return backend_->memory(); }

  // Its local group: the leader makes the group's id; every member then joins with it,
  // which blocks until every member has joined, or throws at `timeout`. Both throw on a
  // backend's failure.
  std::vector<std::uint8_t> new_group_id() const { return group_comm::new_id(*backend_); }
  void join_group(const std::vector<std::uint8_t>& id, int ranks, int rank, std::chrono::milliseconds timeout);
  bool in_group() const { return group_ != nullptr; }
  group_comm& group() { return *group_; }

 private:
  std::unique_ptr<backend_context> backend_;
  compute exec_;  // the host, or backend_
  std::optional<device> off_host_;
  std::unique_ptr<group_comm> group_;  // declared after backend_: closed first
};

}  // namespace troupe
