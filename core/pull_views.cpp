// pull_views: Note [2-bit pulls] in core/pull_views.hpp.
#include "core/pull_views.hpp"

namespace troupe {

namespace {

// view += the decoded codes: the one addition both sides make (bitwise the same result).
void add_decoded(tensor& view, const tensor& decoded) {
  float* v = view.data<float>();
  const float* d = decoded.data<float>();
  for (std::int64_t i = 0, n = view.numel(); i < n; ++i) v[i] += d[i];
}

}  // namespace

tensor pull_views::answer(std::uint32_t member, tensor current, bool full, std::uint64_t part) {
  auto it = views_.find({member, part});
  if (full || it == views_.end() || it->second.numel() != current.numel()) {
    views_[{member, part}] = tensor(current);  // a copy: current may be lent (Note [Lent values])
    return current;
  }
  tensor& view = it->second;
  tensor gap = tensor::uninitialized({current.numel()});
  const float* c = current.data<float>();
  const float* v = view.data<float>();
  float* g = gap.data<float>();
  for (std::int64_t i = 0, n = current.numel(); i < n; ++i) g[i] = c[i] - v[i];
  tensor unsent({current.numel()});  // encode's error feedback, unused: the view keeps the gap
  tensor wire = encode(codec_, gap, unsent);
  auto decoded = decode(codec_, wire, current.numel());
  add_decoded(view, decoded.value());  // our own codes always decode
  return wire;
}

void pull_views::forget(std::uint32_t member) {
  views_.erase(views_.lower_bound({member, 0}), views_.lower_bound({member + 1, 0}));
}

const tensor* pull_views::view(std::uint32_t member, std::uint64_t part) const {
  auto it = views_.find({member, part});
  return it == views_.end() ? nullptr : &it->second;
}

std::optional<std::string> apply_pull(const grad_codec& codec, tensor& view, const_tensor_view answer,
                                      std::int64_t numel) {
  if (answer.type() == dtype::f32) {
    if (held_numel(answer) != numel)
      return "an answer of " + std::to_string(held_numel(answer)) + " parameters, expected " + std::to_string(numel);
    view = tensor::uninitialized({numel});
    copy(view, answer);
    return std::nullopt;
  }
  if (view.numel() != numel)
    return "2-bit codes for a member that holds no parameters of this shard yet (it asked for the full values)";
  auto decoded = decode(codec, answer, numel);
  if (!decoded) return decoded.error().message;
  add_decoded(view, *decoded);
  return std::nullopt;
}

}  // namespace troupe
