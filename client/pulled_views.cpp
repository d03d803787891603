// pulled_views: Note [2-bit key-value pulls] in the header.
#include "client/pulled_views.hpp"

#include "core/pull_views.hpp"

namespace troupe::kv {

bool pulled_views::needs_full(const std::vector<pull_part>& parts) const {
  std::lock_guard lock(mu_);
  for (const auto& p : parts) {
    if (!p.rows.empty()) return true;
    auto it = views_.find(p.part);
    if (it == views_.end() || it->second.numel() != p.numel) return true;
  }
  return false;
}

void pulled_views::take_values(const std::vector<pull_part>& parts, const_tensor_view values) {
  std::lock_guard lock(mu_);
  std::int64_t at = 0;
  for (const auto& p : parts) {
    if (p.rows.empty()) {
      tensor& view = views_[p.part];
      view = tensor::uninitialized({p.numel});
      copy(view, values.flat(at, p.numel));
    }
    at += p.numel;
  }
}

std::optional<std::string> pulled_views::apply_codes(const std::vector<pull_part>& parts, const_tensor_view codes) {
  std::lock_guard lock(mu_);
  std::int64_t bytes = 0;
  for (const auto& p : parts) {
    auto it = views_.find(p.part);
    if (!p.rows.empty() || it == views_.end() || it->second.numel() != p.numel)
      return "2-bit codes for part " + std::to_string(p.part) + ", of which this member holds no copy";
    bytes += encoded_bytes(codec_, p.numel);
  }
  if (codes.empty() || static_cast<std::int64_t>(codes.nbytes()) != bytes)
    return "2-bit codes of " + std::to_string(codes.empty() ? 0 : codes.nbytes()) + " bytes for parts that take " +
           std::to_string(bytes);
  // Decoded into new views first, so that codes that do not decode change nothing.
  std::vector<tensor> next;
  const std::byte* at = codes.bytes();
  for (const auto& p : parts) {
    const std::int64_t n = encoded_bytes(codec_, p.numel);
    tensor view = views_.at(p.part);
    const const_tensor_view piece(at, codes.type(), {n / static_cast<std::int64_t>(size_of(codes.type()))});
    if (auto wrong = apply_pull(codec_, view, piece, p.numel)) return "part " + std::to_string(p.part) + ": " + *wrong;
    next.push_back(std::move(view));
    at += n;
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    copy(floats(parts[i].out, parts[i].numel), next[i]);
    views_[parts[i].part] = std::move(next[i]);
  }
  return std::nullopt;
}

void pulled_views::forget(const std::vector<pull_part>& parts) {
  std::lock_guard lock(mu_);
  for (const auto& p : parts) views_.erase(p.part);
}

}  // namespace troupe::kv
