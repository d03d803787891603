// kv_fast_path: the pools of channels a key-value member keeps to its shards.
#include "client/kv_fast_path.hpp"

#include <spdlog/spdlog.h>

namespace troupe::kv {

kv_fast_path::kv_fast_path(std::string tag, std::uint32_t rank, std::size_t shards)
    : tag_(std::move(tag)), rank_(rank), shards_(shards) {}

std::optional<kv_fast_path::push_lease> kv_fast_path::lend_push(std::uint32_t s, std::int64_t numel) {
  if (numel < min_numel || s >= shards_.size()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto& sh = shards_[s];
  const auto best = smallest_fitting(sh, shm::slot_bytes_for(numel),
                                     [](const entry& e) { return !e.push_busy && e.ch.confirmed(); });
  if (!best) return std::nullopt;
  auto& e = sh.channels[*best];
  auto buffer = e.ch.lend_push_buffer(numel);
  if (!buffer) return std::nullopt;
  e.push_busy = true;
  return push_lease{*best, std::move(*buffer)};
}

shared_tensor kv_fast_path::seal_push(std::uint32_t s, const push_lease& lease) {
  std::lock_guard lock(mu_);
  auto where = shards_.at(s).channels.at(lease.channel).ch.put_push(lease.buffer);
  return where ? std::move(*where) : shared_tensor{};
}

void kv_fast_path::push_settled(std::uint32_t s, std::size_t channel, bool timed_out) {
  std::lock_guard lock(mu_);
  auto& e = shards_.at(s).channels.at(channel);
  e.push_busy = false;
  e.ch.push_settled(timed_out);
}

std::optional<kv_fast_path::reply_lease> kv_fast_path::lend_reply(std::uint32_t s, std::int64_t numel) {
  if (numel < min_numel || s >= shards_.size()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto& sh = shards_[s];
  if (sh.declined) return std::nullopt;
  const std::size_t need = shm::slot_bytes_for(numel);
  auto best = smallest_fitting(sh, need, [](const entry& e) { return !e.reply_busy; });
  if (!best) {
    if (sh.channels.size() >= max_channels) return std::nullopt;
    auto made = shm::shard_channel::create(tag_, std::max(need, min_slot_bytes), rank_);
    if (!made) {
      spdlog::warn("troupe.kv: no shared-memory channel to shard {} ({}); its tensors go over the network", s,
                   made.error().message);
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

expected<tensor> kv_fast_path::take_reply(std::uint32_t s, std::size_t channel, const shared_tensor& where) {
  std::lock_guard lock(mu_);
  auto& sh = shards_.at(s);
  auto& e = sh.channels.at(channel);
  if (!e.reply_busy) return failure{"an answer names a slot this member did not lend"};
  auto t = e.ch.take_reply(where);
  if (t && !sh.announced) {
    sh.announced = true;
    spdlog::info("troupe.kv: exchanges tensors with shard {} through shared memory", s);
  }
  return t;
}

void kv_fast_path::reply_settled(std::uint32_t s, std::size_t channel, bool inline_answer, bool timed_out) {
  std::lock_guard lock(mu_);
  auto& sh = shards_.at(s);
  auto& e = sh.channels.at(channel);
  e.reply_busy = false;
  e.ch.reply_failed(timed_out);
  if (inline_answer && !e.ch.confirmed() && !sh.declined) {
    sh.declined = true;
    e.ch.reply_failed(true);  // closed: never offered again
    spdlog::info("troupe.kv: shard {} cannot map this host's shared memory (another host, or it is off there); "
                 "its tensors go over the network",
                 s);
  }
}

std::size_t kv_fast_path::confirmed(std::uint32_t s) const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& e : shards_.at(s).channels) n += e.ch.confirmed() && !e.ch.closed();
  return n;
}

}  // namespace troupe::kv
