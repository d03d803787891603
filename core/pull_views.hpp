// pull_views: pulls in 2 bits (--pull-precision 2bit). The shard's side keeps, per member,
// the parameters that member holds and answers a pull with the 2-bit code of the
// difference; the member's side applies an answer to what it holds.
//
// Note [2-bit pulls]
// Parameters themselves do not quantise to 2 bits, but the change since a member's last
// pull does, as gradients do. So a shard keeps each member's view (what that member holds
// of the shard's slice) and answers with 2-bit codes of (parameters - view) (Note [2-bit
// gradients]), and both sides add the decoded codes to their copy of the view: the same
// bytes decoded by the same code leave both copies bitwise equal, and what one answer
// leaves out stays in the difference and goes with the next one (the view's distance to
// the parameters is the error feedback). A member computes on its view, which trails the
// parameters by that distance, as an async member's parameters trail by staleness. In
// sync every member starts from the same full answer and gets the same codes, so their
// replicas stay equal. The first answer to a member, an answer to a pull that asks for
// the full values (a member that holds no view: it started or restarted), and the next
// answer over the network after one through the same-host fast path (f32 in shared
// memory) carry f32, and set the view on both sides. The shard keeps one view per member:
// its slice's size again per member. A key-value job's shard keeps one view per member and
// key part it answers whole, and answers a pull in codes only when it holds a view of every
// part the pull names (Note [2-bit key-value pulls] in client/pulled_views.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "tensor/grad_codec.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

class pull_views {
 public:
  explicit pull_views(grad_codec codec) : codec_(codec) {}

  // The answer to `member`'s pull of `current` (its slice of the parameters, packed, f32;
  // or key part `part`'s value): `current` itself when `full` or no view is kept for the
  // member, else the 2-bit code of current minus the view. Either way the view becomes
  // what the member holds once it has applied the answer.
  tensor answer(std::uint32_t member, tensor current, bool full, std::uint64_t part = 0);
  // The member got the full values another way (the fast path): its next answer of the
  // part (of every part: all of them) is full.
  void forget(std::uint32_t member);
  void forget(std::uint32_t member, std::uint64_t part) { views_.erase({member, part}); }
  // What the shard keeps as `member`'s view of the part, or nullptr.
  const tensor* view(std::uint32_t member, std::uint64_t part = 0) const;

 private:
  grad_codec codec_;
  std::map<std::pair<std::uint32_t, std::uint64_t>, tensor> views_;  // by (member, part)
};

// The member's side: applies a shard's answer of `numel` parameters to `view`. An f32
// answer replaces the view; a 2-bit one is decoded and added to it. What is wrong (a size
// that does not fit, 2-bit codes for a member that holds no view, malformed codes), with
// the view unchanged, or nullopt.
std::optional<std::string> apply_pull(const grad_codec& codec, tensor& view, const_tensor_view answer,
                                      std::int64_t numel);

}  // namespace troupe
