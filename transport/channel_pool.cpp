// channel_pool: the channels a member keeps to its shards, created, chosen and settled.
#include "transport/channel_pool.hpp"

#include <algorithm>

namespace troupe::shm {

channel_pool::channel_pool(std::string tag, std::uint32_t rank, std::size_t shards, limits l)
    : tag_(std::move(tag)), rank_(rank), limits_(l), shards_(shards) {}

void channel_pool::skip(std::uint32_t s) {
  std::lock_guard lock(mu_);
  if (s < shards_.size()) shards_[s].declined = true;
}

std::optional<channel_pool::push_lease> channel_pool::lend_push(std::uint32_t s, std::int64_t numel) {
  if (numel < limits_.min_numel || s >= shards_.size()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto& sh = shards_[s];
  const auto best = free_push_channel(sh, slot_bytes_for(numel));
  if (!best) return std::nullopt;
  auto& e = sh.channels[*best];
  auto buffer = e.ch.lend_push_buffer(numel);
  if (!buffer) return std::nullopt;
  e.push_busy = true;
  return push_lease{*best, std::move(*buffer)};
}

shared_tensor channel_pool::seal_push(std::uint32_t s, std::size_t channel, const_tensor_view filled) {
  std::lock_guard lock(mu_);
  auto where = shards_.at(s).channels.at(channel).ch.put_push(filled);
  return where ? std::move(*where) : shared_tensor{};
}

std::optional<channel_pool::sealed_push> channel_pool::copy_push(std::uint32_t s, const_tensor_view data) {
  if (s >= shards_.size() || data.numel() < limits_.min_numel) return std::nullopt;
  std::lock_guard lock(mu_);
  auto& sh = shards_[s];
  const auto best = free_push_channel(sh, data.nbytes());
  if (!best) return std::nullopt;
  auto& e = sh.channels[*best];
  auto where = e.ch.put_push(data);
  if (!where) return std::nullopt;
  e.push_busy = true;
  return sealed_push{*best, std::move(*where)};
}

void channel_pool::push_settled(std::uint32_t s, std::size_t channel, bool timed_out) {
  std::lock_guard lock(mu_);
  auto& e = shards_.at(s).channels.at(channel);
  e.push_busy = false;
  e.ch.push_settled(timed_out);
}

std::optional<channel_pool::reply_lease> channel_pool::lend_reply(std::uint32_t s, std::int64_t numel,
                                                                  std::string* problem) {
  if (numel < limits_.min_numel || s >= shards_.size()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto& sh = shards_[s];
  if (sh.declined) return std::nullopt;
  const std::size_t need = slot_bytes_for(numel);
  auto best = smallest_fitting(sh, need, [](const entry& e) { return !e.reply_busy; });
  if (!best) {
    if (sh.channels.size() >= limits_.max_channels) return std::nullopt;
    auto made = shard_channel::create(tag_, std::max(need, limits_.min_slot_bytes), rank_);
    if (!made) {
      if (problem) *problem = made.error().message;
      sh.declined = true;
      return std::nullopt;
    }
    best = sh.channels.size();
    sh.channels.push_back({std::move(*made), false, false});
  }
  auto& e = sh.channels[*best];
  auto where = e.ch.lend_reply_slot();
  if (!where) return std::nullopt;
  e.reply_busy = true;
  return reply_lease{*best, std::move(*where)};
}

expected<channel_pool::reply> channel_pool::take_reply(std::uint32_t s, std::size_t channel,
                                                       const shared_tensor& where) {
  std::lock_guard lock(mu_);
  if (s >= shards_.size() || channel >= shards_[s].channels.size() || !shards_[s].channels[channel].reply_busy)
    return failure{"an answer names a slot this member did not lend"};
  auto& sh = shards_[s];
  auto t = sh.channels[channel].ch.take_reply(where);
  if (!t) return t.error();
  const bool first = !sh.announced;
  sh.announced = true;
  return reply{std::move(*t), first};
}

channel_pool::settled channel_pool::reply_settled(std::uint32_t s, std::size_t channel, bool inline_answer,
                                                  bool timed_out) {
  std::lock_guard lock(mu_);
  auto& sh = shards_.at(s);
  auto& e = sh.channels.at(channel);
  e.reply_busy = false;
  const bool was_open = !e.ch.closed();
  e.ch.reply_failed(timed_out);
  if (timed_out) return was_open ? settled::closed_by_timeout : settled::nothing;
  if (inline_answer && !e.ch.confirmed() && !sh.declined) {
    sh.declined = true;
    e.ch.reply_failed(true);  // closed: never offered again
    return settled::declined;
  }
  return settled::nothing;
}

std::size_t channel_pool::confirmed(std::uint32_t s) const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& e : shards_.at(s).channels) n += e.ch.confirmed() && !e.ch.closed();
  return n;
}

bool channel_pool::declined(std::uint32_t s) const {
  std::lock_guard lock(mu_);
  return shards_.at(s).declined;
}

std::optional<bell_block> channel_pool::bell(std::uint32_t s, std::size_t channel) const {
  std::lock_guard lock(mu_);
  if (s >= shards_.size() || channel >= shards_[s].channels.size()) return std::nullopt;
  const shard_channel& ch = shards_[s].channels[channel].ch;
  if (!ch.confirmed() || ch.closed()) return std::nullopt;
  return ch.bell();
}

std::string channel_pool::name(std::uint32_t s, std::size_t channel) const {
  std::lock_guard lock(mu_);
  return shards_.at(s).channels.at(channel).ch.name();
}

}  // namespace troupe::shm
