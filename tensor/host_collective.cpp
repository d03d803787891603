// host_collective: the group registry, joining, and the rank-order all-reduce.
#include "tensor/host_collective.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>

namespace troupe {

struct host_collective::group {
  std::mutex mu;
  std::condition_variable cv;
  int ranks = 0, joined = 0, arrived = 0;
  bool broken = false;
  std::string why_broken;
  std::uint64_t generation = 0;  // all-reduces completed
  std::vector<std::vector<std::pair<float*, std::int64_t>>> deposits;  // per rank, this round

  void break_with(std::string why) {
    if (!broken) why_broken = std::move(why);
    broken = true;
    cv.notify_all();
  }
};

namespace {

std::mutex registry_mu;
std::map<std::string, std::weak_ptr<host_collective::group>> registry;  // by id bytes

}  // namespace

std::vector<unsigned char> host_collective::new_id() {
  std::random_device rd;
  std::vector<unsigned char> id(16);
  for (auto& b : id) b = static_cast<unsigned char>(rd());
  return id;
}

expected<std::unique_ptr<host_collective>> host_collective::open(const std::vector<unsigned char>& id, int ranks,
                                                                 int rank, std::chrono::milliseconds timeout) {
  if (ranks < 1 || rank < 0 || rank >= ranks) return failure{"collective rank out of range"};
  std::shared_ptr<group> g;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    auto& slot = registry[std::string(id.begin(), id.end())];
    g = slot.lock();
    if (!g) {
      g = std::make_shared<group>();
      g->ranks = ranks;
      g->deposits.resize(static_cast<std::size_t>(ranks));
      slot = g;
    }
  }
  std::unique_lock<std::mutex> lock(g->mu);
  if (g->ranks != ranks) return failure{"collective opened with " + std::to_string(ranks) + " ranks, the group has " +
                                        std::to_string(g->ranks)};
  ++g->joined;
  g->cv.notify_all();
  if (!g->cv.wait_for(lock, timeout, [&] { return g->joined >= g->ranks || g->broken; }) || g->broken) {
    g->break_with("only " + std::to_string(g->joined) + " of " + std::to_string(ranks) +
                  " members joined the local group within the timeout");
    return failure{g->why_broken};
  }
  return std::unique_ptr<host_collective>(new host_collective(std::move(g), ranks, rank, timeout));
}

host_collective::~host_collective() {
  std::lock_guard<std::mutex> lock(g_->mu);
  // A member that leaves while others wait in a round would leave them waiting forever.
  if (g_->arrived > 0) g_->break_with("member " + std::to_string(rank_) + " of the local group left it during an all-reduce");
  if (--g_->joined == 0) {
    std::lock_guard<std::mutex> reg(registry_mu);
    for (auto it = registry.begin(); it != registry.end();)
      it = it->second.expired() || it->second.lock() == g_ ? registry.erase(it) : std::next(it);
  }
}

std::string host_collective::all_reduce(float* const* buffers, const std::int64_t* counts, int buffer_count) {
  std::unique_lock<std::mutex> lock(g_->mu);
  group& g = *g_;
  if (g.broken) return g.why_broken;
  auto& mine = g.deposits[static_cast<std::size_t>(rank_)];
  mine.clear();
  for (int i = 0; i < buffer_count; ++i) mine.emplace_back(buffers[i], counts[i]);
  const std::uint64_t round = g.generation;
  if (++g.arrived < g.ranks) {
    if (!g.cv.wait_for(lock, timeout_, [&] { return g.generation != round || g.broken; })) {
      g.break_with("the local group's all-reduce waited longer than the timeout for " +
                   std::to_string(g.ranks - g.arrived) + " of its " + std::to_string(g.ranks) +
                   " members (did one die?)");
    }
    return g.generation != round ? std::string() : g.why_broken;
  }
  // The last to arrive: every member is blocked here, so every buffer is safe to touch.
  for (int r = 1; r < g.ranks; ++r)
    if (g.deposits[static_cast<std::size_t>(r)].size() != mine.size())
      g.break_with("members of the local group passed different buffer lists");
  for (std::size_t i = 0; i < mine.size() && !g.broken; ++i) {
    const std::int64_t n = g.deposits[0][i].second;
    for (int r = 1; r < g.ranks; ++r)
      if (g.deposits[static_cast<std::size_t>(r)][i].second != n) g.break_with("members passed buffers of different sizes");
    if (g.broken) break;
    std::vector<float> sum(g.deposits[0][i].first, g.deposits[0][i].first + n);
    for (int r = 1; r < g.ranks; ++r) {
      const float* src = g.deposits[static_cast<std::size_t>(r)][i].first;
      for (std::int64_t k = 0; k < n; ++k) sum[static_cast<std::size_t>(k)] += src[k];
    }
    for (int r = 0; r < g.ranks; ++r) std::copy(sum.begin(), sum.end(), g.deposits[static_cast<std::size_t>(r)][i].first);
  }
  if (g.broken) return g.why_broken;
  g.arrived = 0;
  ++g.generation;
  g.cv.notify_all();
  return {};
}

}  // namespace troupe
