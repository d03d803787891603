// caller_memory: whether a store call may still read or write the arrays its caller
// gave it, and the wait that hands them back.
//
// Note [Abandoned calls]
// push() and pull() return before their arrays are done with: a pull's answer is copied
// into the caller's arrays when it arrives, and a borrowed push (Note [Borrowed pushes]
// in client/borrowed_push.hpp) is read when CAF serializes it. The arrays are the
// caller's again once wait() or wait_all() returns, also when it raises timed_out with
// the call still in flight: it then revokes the call's caller_memory, which waits for a
// copy or a borrow in progress to end, and from then on nothing touches the arrays (an
// answer that comes later is dropped; the shard may still have applied a push). Every
// use of the caller's memory after push() or pull() returns is therefore bracketed by
// enter() and leave(); such a use is a copy, or a borrow that CAF releases once it has
// serialized or dropped the message, so revoke() waits only that long.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

namespace troupe::kv {

class caller_memory {
 public:
  // Whether the caller's arrays may be used; when true, until the matching leave().
  bool enter();
  void leave();
  // From now on enter() says no; returns once every use that entered has left.
  void revoke();
  bool revoked();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int users_ = 0;
  bool revoked_ = false;
};

// One use of the caller's arrays, for a scope: true when it may go ahead.
class caller_memory_use {
 public:
  explicit caller_memory_use(std::shared_ptr<caller_memory> m) : m_(std::move(m)), ok_(!m_ || m_->enter()) {}
  ~caller_memory_use() {
    if (m_ && ok_) m_->leave();
  }
  caller_memory_use(const caller_memory_use&) = delete;
  caller_memory_use& operator=(const caller_memory_use&) = delete;
  explicit operator bool() const { return ok_; }

 private:
  std::shared_ptr<caller_memory> m_;
  bool ok_;
};

}  // namespace troupe::kv
