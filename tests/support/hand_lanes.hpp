// Test helpers: a shard's and a member's bulk lane ends (transport/lane.hpp) without sockets.
// What the shell sends, drops and opens is recorded, and a test delivers payloads and
// closures through `h` as the transport's threads would. Offers name port 4242 and a
// token of 32 'k's.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "transport/lane.hpp"

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

struct hand_member_lanes : lane::member_end {
  handlers h;
  std::set<std::uint32_t> open_to;  // shards whose lane takes payloads
  std::vector<std::pair<std::uint32_t, std::string>> opened;  // (shard, host) dialled
  std::vector<std::tuple<std::uint32_t, std::uint64_t, tensor>> sent;

  void start(handlers x) override { h = std::move(x); }
  void open(std::uint32_t shard, const std::string& host, const lane_offer&) override {
    opened.emplace_back(shard, host);
  }
  bool send(std::uint32_t shard, std::uint64_t ticket, tensor&& t) override {
    if (!open_to.contains(shard)) return false;
    sent.emplace_back(shard, ticket, std::move(t));
    return true;
  }
  std::size_t unsent(std::uint32_t) const override { return 0; }  // handed over at once
};

}  // namespace troupe::test
