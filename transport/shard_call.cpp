// shard_call: the slots of one call to a shard, from its start to its settling.
#include "transport/shard_call.hpp"

#include <utility>

namespace troupe {

tensor shard_call::push_buffer(std::int64_t numel) { return links_ ? links_->push_buffer(shard_, numel) : tensor(); }

shared_tensor shard_call::route_push(tensor& data, bool copy_unlent) {
  if (!links_) return {};
  auto call = links_->route_push(shard_, data, copy_unlent);
  if (!call) return {};
  push_channel_ = call->channel;
  return std::move(call->where);
}

bool shard_call::settle_push(bool timed_out) {
  const auto c = std::exchange(push_channel_, std::nullopt);
  return c && links_->push_settled(shard_, *c, timed_out);
}

shared_tensor shard_call::offer_reply(std::int64_t numel, std::string* problem) {
  if (!links_) return {};
  auto lease = links_->route_pull(shard_, numel, problem);
  if (!lease) return {};
  reply_channel_ = lease->channel;
  return std::move(lease->where);
}

expected<shm::channel_pool::reply> shard_call::take_reply(const shared_tensor& where) {
  if (!reply_channel_) return failure{shard_links::not_offered(shard_)};
  auto got = links_->take_reply(shard_, *reply_channel_, where);
  if (!got) return failure{"shard " + std::to_string(shard_) + "'s answer in shared memory: " + got.error().message};
  return got;
}

shm::channel_pool::settled shard_call::settle_reply(bool inline_answer, bool timed_out) {
  const auto c = std::exchange(reply_channel_, std::nullopt);
  if (!c) return shm::channel_pool::settled::nothing;
  return links_->reply_settled(shard_, *c, inline_answer, timed_out);
}

std::string shard_call::reply_channel_name() const {
  return reply_channel_ ? links_->channel_name(shard_, *reply_channel_) : std::string();
}

const char* shard_call::why_closed(shm::channel_pool::settled s) {
  switch (s) {
    case shm::channel_pool::settled::closed_by_timeout:
      return "a pull timed out, so the shard may still write its slot";
    case shm::channel_pool::settled::declined:
      return "the shard could not map it: another host, or shared memory unavailable there";
    case shm::channel_pool::settled::nothing:
      break;
  }
  return nullptr;
}

}  // namespace troupe
