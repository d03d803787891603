// shm_segment: one POSIX shared-memory segment of a job's same-host fast path (Note
// [Same-host fast path] in transport/shared_slots.hpp): created mode 0600 by the process that
// owns it, named after the job's tag and the creator's pid, opened by a peer only after
// checking the name, the owner, the mode and the header; and the sweep that removes the
// segments a crashed process of the job left behind.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/expected.hpp"

namespace troupe::shm {

// A job's tag is 16 lowercase hex digits (net/ derives it from the job's secret); it names
// the job's segments and is written into their headers.
bool valid_tag(std::string_view tag);

// The bytes of a segment's header; what follows is the owner's to lay out.
inline constexpr std::size_t header_bytes = 64;

class segment {
 public:
  segment() = default;
  segment(segment&& o) noexcept;
  segment& operator=(segment&& o) noexcept;
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment();

  // A new segment of `bytes` bytes (header included, zero-filled) for the job `tag`, named
  // /troupe-TAG-PID-N-RANDOM, mode 0600, owned by this process: its name is removed when
  // it is destroyed unless unlink() already did. `label` goes into the header for peers to
  // check (the fast path writes the creating member's rank).
  static expected<segment> create(std::string_view tag, std::size_t bytes, std::uint64_t label = 0);
  // Maps another process's segment of the job `tag`. Refused, with the reason, unless the
  // name is one of the job's, the object is a regular file owned by `owner` (this
  // process's effective user by default) with no permission for group or others, at
  // least as large as its header says, and the header carries the job's tag.
  static expected<segment> open(std::string_view name, std::string_view tag, uid_t owner);
  static expected<segment> open(std::string_view name, std::string_view tag);

  const std::string& name() const { return name_; }
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::uint64_t label() const { return label_; }
  bool mapped() const { return data_ != nullptr; }
  // Removes the name (the mapping stays): once every peer has mapped it, a crash can leave
  // nothing behind. Only the creator unlinks.
  void unlink();

 private:
  void release();
  std::string name_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t label_ = 0;
  bool owner_ = false;
};

// Removes the segments of the job `tag` (in /dev/shm) whose creating process is gone and
// that this user owns; returns how many. Every node of the job calls it at its start.
std::size_t sweep(std::string_view tag);

}  // namespace troupe::shm
