// Test helper: a shard's bulk lane end (core/lane.hpp) without sockets. What the shard's
// shell sends and drops is recorded, and a test delivers payloads and closures through
// `h` as the transport's threads would. Offers name port 4242 and a token of 32 'k's.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/lane.hpp"

namespace troupe::test {

struct hand_lanes : lane::shard_end {
  handlers h;
  std::set<std::uint32_t> open;  // ranks whose lane carries answers
  std::vector<std::tuple<std::uint32_t, std::uint64_t, tensor>> sent;
  std::vector<std::uint32_t> dropped, offered;

  void start(handlers x) override { h = std::move(x); }
  expected<lane_offer> offer(std::uint32_t rank) override {
    offered.push_back(rank);
    return lane_offer{4242, std::string(32, 'k')};
  }
  bool send(std::uint32_t rank, std::uint64_t ticket, tensor&& t) override {
    if (!open.contains(rank)) return false;
    sent.emplace_back(rank, ticket, std::move(t));
    return true;
  }
  void drop(std::uint32_t rank, const std::string&) override {
    dropped.push_back(rank);
    open.erase(rank);
  }
};

}  // namespace troupe::test
