// pulled_views: a key-value member's side of 2-bit pulls (--pull-precision 2bit): the copy
// it holds of each key part it pulls whole, to which a shard's 2-bit codes are added.
//
// Note [2-bit key-value pulls]
// As a training member does (Note [2-bit pulls] in core/pull_views.hpp), a key-value
// member keeps a copy, its view, of every key part it pulls whole, and each shard keeps
// the same view per member and part: a pull is answered with 2-bit codes of the change
// since (each part encoded on its own, the codes concatenated), both sides add the
// decoded codes to their views, and the member copies its views into the caller's arrays.
// A shard answers in codes only a pull of whole parts of all of which it holds a view,
// and which does not ask for f32 (`kv_pull::full`); otherwise in f32, which both sides
// take as their views. The member asks for f32 when it holds no view of some part, and
// forgets its views of a pull that failed or that its caller abandoned (the shard may have
// moved its views already), so the next pull of those parts asks for f32 again. A part
// pulled by rows keeps no view. Answers through the same-host fast path are f32, which the
// shard then forgets its views of. A view trails the values as a stale pull does, so the
// steps that are stable with f32 pulls may not be with 2-bit ones when momentum is heavy:
// a quadratic two sync workers pushed at lr 0.1 and momentum 0.9 converged with f32 pulls
// and diverged after about 100 steps with 2-bit ones (at momentum 0 both converged).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/kv_transport.hpp"
#include "tensor/grad_codec.hpp"

namespace troupe::kv {

class pulled_views {
 public:
  explicit pulled_views(grad_codec codec) : codec_(codec) {}

  // Whether a pull of `parts` must ask for f32 values (some part is pulled by rows, or has
  // no view of its size).
  bool needs_full(const std::vector<pull_part>& parts) const;
  // A pull answered in f32 (`values`: the parts' values, concatenated): the views of the
  // whole parts become their values.
  void take_values(const std::vector<pull_part>& parts, const_tensor_view values);
  // A pull of whole parts answered in 2-bit codes: each part's codes decoded onto its view
  // and the view copied into the caller's array. What is wrong (codes that do not fit the
  // parts, a part without a view), with no view and no array changed.
  std::optional<std::string> apply_codes(const std::vector<pull_part>& parts, const_tensor_view codes);
  // The pull of `parts` failed or was abandoned: their next pull asks for f32.
  void forget(const std::vector<pull_part>& parts);

 private:
  grad_codec codec_;
  mutable std::mutex mu_;  // pulls are made on the caller's thread and answered on the member's
  std::map<kv_part_id, tensor> views_;
};

}  // namespace troupe::kv
