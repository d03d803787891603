// shard_links: how each of a member's calls to a shard travels, chosen per shard.
#include "transport/shard_links.hpp"

#include <utility>

namespace troupe {

void shard_links::wire(std::vector<reach> shards, options o) {
  {
    std::lock_guard lock(mu_);
    lent_.clear();
  }
  reach_ = std::move(shards);
  pool_.reset();
  if (o.fast_path_tag.empty()) return;
  pool_ = std::make_unique<shm::channel_pool>(std::move(o.fast_path_tag), o.rank, reach_.size(), o.limits);
  for (std::uint32_t s = 0; s < reach_.size(); ++s)
    if (reach_[s] != reach::other_process) pool_->skip(s);  // the message shares the tensor
}

std::size_t shard_links::size() const { return reach_.size(); }

bool shard_links::whole_slices(std::uint32_t s) const {
  if (reach_of(s) != reach::other_process) return true;
  return pool_ && !pool_->declined(s);
}

bool shard_links::over_the_network(std::uint32_t s) const {
  return reach_of(s) == reach::other_process && (!pool_ || pool_->declined(s));
}

tensor shard_links::push_buffer(std::uint32_t s, std::int64_t numel) {
  if (!pool_ || reach_of(s) != reach::other_process) return {};
  auto lease = pool_->lend_push(s, numel);
  if (!lease) return {};
  std::lock_guard lock(mu_);
  lent_[lease->buffer.bytes()] = {s, lease->channel};
  return std::move(lease->buffer);
}

std::optional<shard_links::slot_call> shard_links::route_push(std::uint32_t s, tensor& data, bool copy_unlent) {
  if (!pool_ || reach_of(s) != reach::other_process) return std::nullopt;
  std::optional<lent> lease;
  if (!data.empty()) {
    std::lock_guard lock(mu_);
    if (auto it = lent_.find(data.bytes()); it != lent_.end() && it->second.shard == s) {
      lease = it->second;
      lent_.erase(it);
    }
  }
  if (lease) {
    shared_tensor where = pool_->seal_push(s, lease->channel, data);
    if (!where.empty()) {
      data = tensor();
      return slot_call{lease->channel, std::move(where)};
    }
    data = tensor(data);  // a copy out of the slot, which goes back now
    pool_->push_settled(s, lease->channel, false);
  }
  if (!copy_unlent || data.empty()) return std::nullopt;
  auto sealed = pool_->copy_push(s, data);
  if (!sealed) return std::nullopt;
  data = tensor();
  return slot_call{sealed->channel, std::move(sealed->where)};
}

bool shard_links::push_settled(std::uint32_t s, std::size_t channel, bool timed_out) {
  if (!pool_) return false;
  pool_->push_settled(s, channel, timed_out);
  return timed_out;
}

std::string shard_links::not_offered(std::uint32_t s) {
  return "shard " + std::to_string(s) +
         " answered in shared memory that this member did not offer; the answer is refused. Every node of a job "
         "must run the same troupe build: check `troupe --version` on the shard's host";
}

std::optional<shard_links::slot_call> shard_links::route_pull(std::uint32_t s, std::int64_t numel,
                                                              std::string* problem) {
  if (!pool_ || reach_of(s) != reach::other_process) return std::nullopt;
  auto lease = pool_->lend_reply(s, numel, problem);
  if (!lease) return std::nullopt;
  return slot_call{lease->channel, std::move(lease->where)};
}

expected<shm::channel_pool::reply> shard_links::take_reply(std::uint32_t s, std::size_t channel,
                                                           const shared_tensor& where) {
  if (!pool_) return failure{not_offered(s)};
  return pool_->take_reply(s, channel, where);
}

shm::channel_pool::settled shard_links::reply_settled(std::uint32_t s, std::size_t channel, bool inline_answer,
                                                      bool timed_out) {
  if (!pool_) return shm::channel_pool::settled::nothing;
  return pool_->reply_settled(s, channel, inline_answer, timed_out);
}

std::optional<shm::bell_block> shard_links::bell(std::uint32_t s, std::size_t channel) const {
  if (!pool_) return std::nullopt;
  return pool_->bell(s, channel);
}

std::string shard_links::channel_name(std::uint32_t s, std::size_t channel) const {
  return pool_ ? pool_->name(s, channel) : std::string();
}

}  // namespace troupe
