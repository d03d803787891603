// borrowed_push: a push message's tensor that borrows the caller's floats instead of
// copying them, and the completion that waits until the message has let go of them.
//
// Note [Borrowed pushes]
// An uncompressed push over the network whose parts lie back to back in the caller's
// memory (one array, or the parts of one key for one shard) is not copied into a buffer
// of its own: the message's tensor borrows the caller's floats, and CAF serializes them
// straight into the connection's buffer (one 40 MB copy fewer per 10M-float push). The
// caller owns its floats until the completion (client/kv_transport.hpp), so the
// completion runs once both have happened, in either order: the shard answered, and the
// message is gone (the borrowed tensor's release, when CAF has serialized, delivered or
// dropped it). A store that closes with pushes still borrowed waits for their release
// (borrow_ledger), so that the caller may free its arrays once close() returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "client/kv_transport.hpp"

namespace troupe::kv {

// How many borrowed tensors of one transport are not released yet.
class borrow_ledger {
 public:
  void lent();
  void returned();
  // Whether none is outstanding, waiting at most `d` for the last release.
  bool wait_all_returned(std::chrono::milliseconds d);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t outstanding_ = 0;
};

class borrowed_push {
 public:
  // `memory`, if given, was entered for the borrow; the release leaves it (Note
  // [Abandoned calls] in client/caller_memory.hpp).
  explicit borrowed_push(completion done, std::shared_ptr<borrow_ledger> ledger = nullptr,
                         std::shared_ptr<caller_memory> memory = nullptr)
      : done_(std::move(done)), ledger_(std::move(ledger)), memory_(std::move(memory)) {}

  // The tensor for the message: n floats at data, not copied; its release is one of the
  // two events the completion waits for. It must only be read.
  static tensor lend(const std::shared_ptr<borrowed_push>& self, const float* data, std::int64_t n);

  // The shard's answer: the other event.
  void answered(std::optional<fault> f, std::vector<part_result> r);

 private:
  using answer = std::pair<std::optional<fault>, std::vector<part_result>>;
  void settle(std::optional<answer> a);  // once with the answer, once (nullopt) at the release

  std::mutex mu_;
  int events_ = 0;
  std::optional<answer> answer_;
  completion done_;
  std::shared_ptr<borrow_ledger> ledger_;
  std::shared_ptr<caller_memory> memory_;
};

// The first part's floats when the parts lie back to back in the caller's memory (a
// borrowed push can then carry them as one tensor), else nullptr.
const float* contiguous_floats(const std::vector<push_part>& parts);

}  // namespace troupe::kv
