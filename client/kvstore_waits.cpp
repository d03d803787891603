// kvstore: waiting on handles (wait, wait_all and their bounded forms): a call not
// answered in time is abandoned and its arrays given back to the caller (Note [Abandoned
// calls]); a settled one is forgotten and its error thrown.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "client/kvstore_impl.hpp"

namespace troupe::kv {

namespace {
[[noreturn]] void no_answer(std::chrono::milliseconds timeout) {
  raise(fault{errc::timed_out, "no answer from the shards within " + std::to_string(timeout.count()) +
                                   " ms; a shard may be lost or a sync round waits for a worker that has not pushed. "
                                   "The call was abandoned: its arrays are yours again"});
}
}  // namespace

// Waits at most `d` for operation h; once it is settled, forgets it and throws its error.
bool kvstore::impl::await_one(std::unique_lock<std::mutex>& lock, handle h, std::chrono::milliseconds d) {
  if (h == 0 || h >= next)
    raise(fault{errc::bad_job, "wait: handle " + std::to_string(h) + " was never returned by this store"});
  auto settled = [&] {
    auto it = ops.find(h);
    return it == ops.end() || it->second.pending == 0;
  };
  const auto start = step_meter::clock::now();
  const bool in_time = cv.wait_for(lock, d, settled);
  steps.blocked(step_meter::clock::now() - start);
  if (!in_time) return false;
  auto it = ops.find(h);
  if (it == ops.end()) return true;
  auto err = it->second.error;
  ops.erase(it);
  if (err) raise(*err);
  return true;
}

// Waits at most `d` for every operation; once all are settled, forgets them and throws
// the first error.
bool kvstore::impl::await_all(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds d) {
  auto settled = [&] { return std::all_of(ops.begin(), ops.end(), [](auto& o) { return o.second.pending == 0; }); };
  const auto start = step_meter::clock::now();
  const bool in_time = cv.wait_for(lock, d, settled);
  steps.blocked(step_meter::clock::now() - start);
  if (!in_time) return false;
  std::optional<fault> first;
  for (auto& [h, o] : ops)
    if (o.error && !first) first = o.error;
  ops.clear();
  if (first) raise(*first);
  return true;
}

void kvstore::wait(handle h) { wait(h, impl_->opts.timeout); }

void kvstore::wait(handle h, std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  if (impl_->await_one(lock, h, timeout)) return;
  if (impl_->abandon(lock, [h](handle x) { return x == h; }) == 0) {  // settled meanwhile
    impl_->await_one(lock, h, std::chrono::milliseconds(0));
    return;
  }
  no_answer(timeout);
}

void kvstore::wait_all() { wait_all(impl_->opts.timeout); }

void kvstore::wait_all(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  if (impl_->await_all(lock, timeout)) return;
  if (impl_->abandon(lock, [](handle) { return true; }) == 0) {
    impl_->await_all(lock, std::chrono::milliseconds(0));
    return;
  }
  impl_->ops.clear();  // what settled with an error is part of what timed out
  no_answer(timeout);
}

bool kvstore::wait_for(handle h, std::chrono::milliseconds d) {
  std::unique_lock lock(impl_->mu);
  return impl_->await_one(lock, h, d);
}

bool kvstore::wait_all_for(std::chrono::milliseconds d) {
  std::unique_lock lock(impl_->mu);
  return impl_->await_all(lock, d);
}

}  // namespace troupe::kv
