// transport_waits: what remote_transport's calls wait on and count: a blocking call's
// bounded wait, the fault of a call its caller abandoned, and the bytes moved.
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <string>

#include "client/kv_transport.hpp"

namespace troupe::kv {

// Whether a call failed because it was not answered in time (its slot may still be used).
template <class T>
bool timed_out(const or_fault<T>& r) {
  const auto* f = std::get_if<fault>(&r);
  return f && f->code == errc::timed_out;
}

// What the transport moved, counted from any thread.
class transfer_counters {
 public:
  void add(bool shared, std::size_t bytes) {
    (shared ? shared_calls_ : network_calls_).fetch_add(1, std::memory_order_relaxed);
    (shared ? shared_bytes_ : network_bytes_).fetch_add(bytes, std::memory_order_relaxed);
  }
  transfer_stats get() const {
    return {shared_calls_.load(), network_calls_.load(), shared_bytes_.load(), network_bytes_.load()};
  }

 private:
  std::atomic<std::uint64_t> shared_calls_{0}, network_calls_{0}, shared_bytes_{0}, network_bytes_{0};
};

// What a call that its caller abandoned reports (Note [Abandoned calls]); nobody waits
// for it any more.
inline fault abandoned() {
  return fault{errc::timed_out, "the caller stopped waiting for this call; its arrays were not used since"};
}

// Waits for a blocking call's answer, at most `timeout`.
template <class T>
or_fault<T> await(std::future<or_fault<T>>& f, std::chrono::milliseconds timeout, const std::string& what) {
  if (f.wait_for(timeout) != std::future_status::ready)
    return fault{errc::timed_out, what + ": no answer within " + std::to_string(timeout.count()) + " ms"};
  return f.get();
}

}  // namespace troupe::kv
