// lane_io: what both ends of a bulk lane (Note [Bulk lanes] in transport/lane.hpp) do with a
// welcomed connection: one thread writes the payloads queued for the peer, another reads
// the peer's payloads, each until its stream fails or the lane closes; and the lane's
// shared state, which closes once, from whichever thread sees the failure first. Also the
// threads of a transport, joined when it goes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "transport/lane.hpp"
#include "transport/lane_stream.hpp"

namespace troupe::lane {

// One member-shard lane: its payloads to send and its connections' sockets, which
// close() shuts down (waking their threads). Thread-safe.
class lane_pair {
 public:
  explicit lane_pair(std::uint32_t peer) : peer_(peer) {}
  std::uint32_t peer() const { return peer_; }

  // Queues a payload for the writer (moved from only then); false once the lane is closed.
  bool push(std::uint64_t ticket, tensor&& t);
  // The next payload to write, waiting for one; nullopt once the lane is closed.
  std::optional<std::pair<std::uint64_t, tensor>> next();
  // The writer handed the payload next() gave it to the socket.
  void written();
  // Payloads pushed and not yet written (the one being written too); 0 once closed.
  std::size_t unsent() const { std::lock_guard l(mu_); return unsent_; }
  // Registers a welcomed connection's socket; false (nothing registered) once closed.
  bool attach(int fd);
  void detach(int fd);
  // Marks the lane open (both connections welcomed) or asks whether it is.
  void set_open() { std::lock_guard l(mu_); open_ = !closed_; }
  bool open() const { std::lock_guard l(mu_); return open_; }
  // Closes the lane: drops what is queued and shuts its sockets. True the first time (the
  // caller then reports `why`).
  bool close();

 private:
  const std::uint32_t peer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::uint64_t, tensor>> queue_;
  std::vector<int> fds_;
  std::size_t unsent_ = 0;
  bool open_ = false, closed_ = false;
};

// Writes the lane's queued payloads to `s` until the lane closes (nullopt) or a write
// fails (why); each write may go `idle` without progress.
std::optional<std::string> write_payloads(lane_stream& s, lane_pair& lane, std::chrono::milliseconds idle);
// Reads payloads from `s`, each checked against the process's frame bound before it is
// allocated, and hands them to `got`, until a read fails or a frame is malformed (why).
// With scan_finite, each f32 payload is scanned for NaN and Inf as it is read (Note
// [Scanned on arrival] in transport/lane.hpp); otherwise every arrival says finite = false.
std::optional<std::string> read_payloads(lane_stream& s, std::chrono::milliseconds idle, bool scan_finite,
                                         const std::function<void(std::uint64_t, arrival)>& got);

// The threads of a transport: started, reaped once finished, and joined at the end.
class thread_set {
 public:
  ~thread_set() { join_all(); }
  void spawn(std::function<void()> fn);
  void join_all();

 private:
  struct entry {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void reap();  // under mu_
  std::mutex mu_;
  std::list<entry> threads_;
};

// Ignores SIGPIPE in this process: a peer that closes a lane connection while a payload is
// written must make the write fail, not kill the process (OpenSSL writes with write(2)).
void ignore_sigpipe();

}  // namespace troupe::lane
