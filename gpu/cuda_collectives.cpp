// The CUDA backend's collective entries: NCCL among the GPUs of one node, opened
// non-blocking and polled, so a member that died makes the collective fail at its
// deadline (the communicator is aborted) instead of hanging.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "gpu/cuda_context.hpp"
#include "gpu/cuda_entries.hpp"

namespace troupe::gpu {

namespace {

// NCCL in non-blocking mode: polls the communicator until its pending work is accepted;
// at the deadline (a member that died) the communicator is aborted, never waited on.
void await_nccl(nccl_comm& comm, std::int64_t timeout_ms, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    TROUPE_GPU(ncclCommGetAsyncError(comm.get(), &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress || std::chrono::steady_clock::now() > deadline) {
      (void)ncclCommAbort(comm.release());
      if (state != ncclInProgress) TROUPE_GPU(state);
      throw gpu_error(std::string(what) + ": no progress within " + std::to_string(timeout_ms) +
                      " ms; a member of the local group is gone, so the communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Waits for `done` on the communication stream the same way.
void await_event(nccl_comm& comm, cudaEvent_t done, std::int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) TROUPE_GPU(q);
    ncclResult_t state = ncclSuccess;
    TROUPE_GPU(ncclCommGetAsyncError(comm.get(), &state));
    if ((state != ncclSuccess && state != ncclInProgress) || std::chrono::steady_clock::now() > deadline) {
      (void)ncclCommAbort(comm.release());
      if (state != ncclSuccess && state != ncclInProgress) TROUPE_GPU(state);
      throw gpu_error("ncclAllReduce: not finished within " + std::to_string(timeout_ms) +
                      " ms; a member of the local group is gone, so the communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

namespace entry {

int collective_id(unsigned char* id, size_t capacity, size_t* size) {
  return guarded([&] {
    if (capacity < sizeof(ncclUniqueId)) throw gpu_error("collective id buffer smaller than NCCL_UNIQUE_ID_BYTES");
    ncclUniqueId u{};
    TROUPE_GPU(ncclGetUniqueId(&u));
    std::memcpy(id, &u, sizeof u);
    *size = sizeof u;
  });
}

// A non-blocking NCCL init, polled until it is ready or the deadline passes.
int collective_open(void* ctx, const unsigned char* id, size_t size, int ranks, int rank, int64_t timeout_ms,
                    void** comm) {
  return on_device(ctx, [&](context&) {
    if (size != sizeof(ncclUniqueId))
      throw gpu_error("an NCCL unique id is " + std::to_string(sizeof(ncclUniqueId)) + " bytes, not " +
                      std::to_string(size));
    if (ranks < 1 || rank < 0 || rank >= ranks) throw gpu_error("NCCL rank out of range");
    ncclUniqueId u{};
    std::memcpy(&u, id, sizeof u);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t raw{};
    const ncclResult_t started = ncclCommInitRankConfig(&raw, ranks, u, rank, &config);
    if (started != ncclSuccess && started != ncclInProgress) TROUPE_GPU(started);
    auto owned = std::make_unique<nccl_comm>(raw);
    ctx_of(ctx).timeout_ms = timeout_ms;
    await_nccl(*owned, timeout_ms, "ncclCommInitRankConfig (waiting for every member of the local group)");
    *comm = owned.release();
  });
}

void collective_close(void* comm) { delete static_cast<nccl_comm*>(comm); }

// Grouped, on the communication stream after the compute stream's work; returns when the
// sums are in place, or aborts the communicator at the deadline.
int all_reduce_sum(void* ctx, void* comm, float* const* buffers, const int64_t* counts, int buffer_count) {
  return on_device(ctx, [&](context& c) {
    auto* nc = static_cast<nccl_comm*>(comm);
    TROUPE_GPU(cudaEventRecord(c.compute_ready.get(), c.compute.get()));
    TROUPE_GPU(cudaStreamWaitEvent(c.comm.get(), c.compute_ready.get(), 0));
    const auto accepted = [](ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; };
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < buffer_count && accepted(r); ++i)
      r = ncclAllReduce(buffers[i], buffers[i], static_cast<size_t>(counts[i]), ncclFloat, ncclSum, nc->get(),
                        c.comm.get());
    const ncclResult_t ended = ncclGroupEnd();
    if (!accepted(r)) TROUPE_GPU(r);
    if (!accepted(ended)) TROUPE_GPU(ended);
    await_nccl(*nc, c.timeout_ms, "ncclAllReduce enqueue");
    TROUPE_GPU(cudaEventRecord(c.comm_done.get(), c.comm.get()));
    await_event(*nc, c.comm_done.get(), c.timeout_ms);
    TROUPE_GPU(cudaStreamWaitEvent(c.compute.get(), c.comm_done.get(), 0));
  });
}

}  // namespace entry

}  // namespace troupe::gpu
