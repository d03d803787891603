// doorbell: the bell queues' counts, records and futex wakes (Note [Doorbells]).
#include "transport/doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace troupe::shm {

namespace {

std::atomic_ref<std::uint32_t> word(std::uint32_t* w) { return std::atomic_ref<std::uint32_t>(*w); }

}  // namespace

bool bell_queue::post(std::span<const std::byte> rec) {
  if (rec.size() > bell_record_payload) return false;
  const std::uint32_t posted = word(posted_word()).load(std::memory_order_relaxed);
  const std::uint32_t taken = word(taken_word()).load(std::memory_order_acquire);
  if (posted - taken >= bell_records) return false;
  std::byte* at = record(posted);
  const auto n = static_cast<std::uint64_t>(rec.size());
  std::memcpy(at, &n, sizeof n);
  if (!rec.empty()) std::memcpy(at + 8, rec.data(), rec.size());
  word(posted_word()).store(posted + 1, std::memory_order_release);
  return true;
}

void bell_queue::ring() const {
  // Not FUTEX_PRIVATE_FLAG: the word lies in memory shared between processes.
  ::syscall(SYS_futex, posted_word(), FUTEX_WAKE, 1 << 30, nullptr, nullptr, 0);
}

bool bell_queue::unread(std::uint32_t& posted) const {
  posted = word(posted_word()).load(std::memory_order_acquire);
  return posted != word(taken_word()).load(std::memory_order_relaxed);
}

std::optional<std::vector<std::byte>> bell_queue::take(bool& corrupt) {
  corrupt = false;
  const std::uint32_t posted = word(posted_word()).load(std::memory_order_acquire);
  const std::uint32_t taken = word(taken_word()).load(std::memory_order_relaxed);
  if (posted == taken) return std::nullopt;
  if (posted - taken > bell_records) {
    corrupt = true;
    return std::nullopt;
  }
  const std::byte* at = record(taken);
  std::uint64_t n = 0;
  std::memcpy(&n, at, sizeof n);
  if (n > bell_record_payload) {
    corrupt = true;
    return std::nullopt;
  }
  std::vector<std::byte> out(at + 8, at + 8 + n);
  word(taken_word()).store(taken + 1, std::memory_order_release);
  return out;
}

void bell_block::set_listening() const {
  word(reinterpret_cast<std::uint32_t*>(base_)).store(1, std::memory_order_release);
}

bool bell_block::listening() const {
  return word(reinterpret_cast<std::uint32_t*>(base_)).load(std::memory_order_acquire) == 1;
}

}  // namespace troupe::shm
