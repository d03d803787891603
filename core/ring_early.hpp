// ring_early: the pieces of ring collectives that came before this member started them,
// held by the collective's number until it does, for both kinds of ring member: a
// training member's ring of gradients (core/member_ring.cpp) and a users' ring of calls
// (client/kv_member_ring.cpp). A neighbour may run ahead of this member: it cannot finish
// a collective before this member put its values in, but it may start the next ones (a
// trainer's next step; a users' broadcast root, which needs nothing from the others). So
// a piece of a collective not yet started here waits, as long as it is at most `ahead`
// collectives past the current one and fewer than `most` pieces wait; any other piece
// (of a collective done here, too far ahead, or past the bound) comes from a broken or
// disagreeing neighbour, and the caller stops its ring saying why. CAF-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "core/ring_collective.hpp"

namespace troupe {

class ring_early {
 public:
  // Any number of collectives ahead (a users' ring).
  static constexpr std::uint64_t any = std::numeric_limits<std::uint64_t>::max();

  enum class verdict { held, behind, too_far, too_many };
  // Holds piece `p` of collective `number` when this member's next collective to start
  // is `first` (the current one's number + 1 while it runs), or says why not.
  verdict hold(ring_piece p, std::uint64_t number, std::uint64_t first, std::uint64_t ahead, std::size_t most);
  // The pieces of collective `number` held, in the order they came; they are held no more.
  std::vector<ring_piece> take(std::uint64_t number);
  std::size_t size() const { return count_; }
  void clear() {
    held_.clear();
    count_ = 0;
  }

 private:
  std::map<std::uint64_t, std::vector<ring_piece>> held_;
  std::size_t count_ = 0;
};

}  // namespace troupe
