// caller_memory: Note [Abandoned calls] in client/caller_memory.hpp.
#include "client/caller_memory.hpp"

namespace troupe::kv {

bool caller_memory::enter() {
  std::lock_guard lock(mu_);
  if (revoked_) return false;
  ++users_;
  return true;
}

void caller_memory::leave() {
  std::lock_guard lock(mu_);
  if (--users_ == 0) cv_.notify_all();
}

void caller_memory::revoke() {
  std::unique_lock lock(mu_);
  revoked_ = true;
  cv_.wait(lock, [this] { return users_ == 0; });
}

bool caller_memory::revoked() {
  std::lock_guard lock(mu_);
  return revoked_;
}

}  // namespace troupe::kv
