// host_collective: the CPU backend's collectives, an all-reduce among threads of one
// process (workers of one `troupe train` job). A group is named by an id of random bytes;
// each member opens it with (id, ranks, rank), and all call all_reduce in the same order.
// The last member to arrive sums every member's buffers in rank order and writes the sum
// back into all of them, so the result is bitwise what a rank-order sum gives. Every wait
// has a deadline: a member that never arrives (it died) fails the others' calls with a
// message, and the group stays broken, so no member hangs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/expected.hpp"

namespace troupe {

class host_collective {
 public:
  static std::vector<unsigned char> new_id();

  // Joins the group; returns once all `ranks` members have joined, or fails after `timeout`.
  static expected<std::unique_ptr<host_collective>> open(const std::vector<unsigned char>& id, int ranks, int rank,
                                                         std::chrono::milliseconds timeout);
  ~host_collective();  // leaves the group; members still calling fail instead of waiting
  host_collective(const host_collective&) = delete;
  host_collective& operator=(const host_collective&) = delete;

  // Sums buffers[i] (counts[i] floats) across the group in place. Every member passes the
  // same counts. Empty string on success, else why it failed.
  std::string all_reduce(float* const* buffers, const std::int64_t* counts, int buffer_count);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }

  struct group;

 private:
  host_collective(std::shared_ptr<group> g, int ranks, int rank, std::chrono::milliseconds timeout)
      : g_(std::move(g)), ranks_(ranks), rank_(rank), timeout_(timeout) {}
  std::shared_ptr<group> g_;
  int ranks_, rank_;
  std::chrono::milliseconds timeout_;
};

}  // namespace troupe
