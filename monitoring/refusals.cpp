// refusals: the process-wide counters and the set of peers already logged.
#include "monitoring/refusals.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <utility>

namespace troupe::monitoring {

namespace {

// Peers remembered for logging; past this, refusals are still counted but new peers are
// no longer logged (a flood of addresses cannot grow the process without bound).
constexpr std::size_t max_remembered_peers = 4096;

struct ledger {
  std::array<std::atomic<std::uint64_t>, refusal_kinds> counts{};
  std::mutex mutex;
  std::set<std::pair<refusal, std::string>, std::less<>> logged;
  std::array<std::chrono::steady_clock::time_point, refusal_kinds> last_anonymous_log{};
};

ledger& the_ledger() {
  static auto* l = new ledger;  // never destroyed: the transport may refuse during exit
  return *l;
}

}  // namespace

std::string_view name_of(refusal r) {
  switch (r) {
    case refusal::oversized_frame: return "oversized_frame";
    case refusal::handshake_deadline: return "handshake_deadline";
    case refusal::handshake_cap: return "handshake_cap";
    case refusal::unproven_join: return "unproven_join";
    case refusal::not_a_member: return "not_a_member";
    case refusal::not_the_coordinator: return "not_the_coordinator";
    case refusal::not_a_neighbour: return "not_a_neighbour";
    case refusal::wrong_role: return "wrong_role";
    case refusal::wrong_host: return "wrong_host";
    case refusal::lane_refused: return "lane_refused";
  }
  return "unknown";
}

bool count_refusal(refusal r, std::string_view peer) {
  ledger& l = the_ledger();
  const auto i = static_cast<std::size_t>(r);
  l.counts[i].fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(l.mutex);
  if (peer.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (l.last_anonymous_log[i] != std::chrono::steady_clock::time_point{} &&
        now - l.last_anonymous_log[i] < std::chrono::minutes(1))
      return false;
    l.last_anonymous_log[i] = now;
    return true;
  }
  if (l.logged.size() >= max_remembered_peers) return false;
  return l.logged.emplace(r, std::string(peer)).second;
}

std::uint64_t refusals(refusal r) {
  return the_ledger().counts[static_cast<std::size_t>(r)].load(std::memory_order_relaxed);
}

}  // namespace troupe::monitoring
