// Tensor fusion's groups and packing (Note [Tensor fusion] in the header).
#include "core/tensor_fusion.hpp"

#include "base/check.hpp"

namespace troupe {

std::vector<fusion_group> plan_fusion(const std::vector<std::int64_t>& numels, std::int64_t threshold_bytes) {
  const std::int64_t cap = threshold_bytes / static_cast<std::int64_t>(sizeof(float));
  std::vector<fusion_group> groups;
  for (std::size_t i = 0; i < numels.size(); ++i) {
    TROUPE_CHECK(numels[i] >= 0, "plan_fusion: a negative element count");
    if (!groups.empty() && groups.back().last == i && groups.back().numel + numels[i] <= cap) {
      ++groups.back().last;
      groups.back().numel += numels[i];
    } else {
      groups.push_back({i, i + 1, numels[i]});
    }
  }
  return groups;
}

void pack_fusion(tensor_view buffer, const std::vector<const_tensor_view>& tensors, const fusion_group& g) {
  TROUPE_CHECK(g.last <= tensors.size() && buffer.numel() == g.numel, "pack_fusion: the buffer does not fit the group");
  std::int64_t at = 0;
  for (std::size_t i = g.first; i < g.last; ++i) {
    copy(buffer.flat(at, tensors[i].numel()), tensors[i]);
    at += tensors[i].numel();
  }
  TROUPE_CHECK(at == g.numel, "pack_fusion: the tensors do not fill the group");
}

void unpack_fusion(const_tensor_view buffer, const std::vector<tensor_view>& tensors, const fusion_group& g) {
  TROUPE_CHECK(g.last <= tensors.size() && buffer.numel() == g.numel,
               "unpack_fusion: the buffer does not fit the group");
  std::int64_t at = 0;
  for (std::size_t i = g.first; i < g.last; ++i) {
    copy(tensors[i], buffer.flat(at, tensors[i].numel()));
    at += tensors[i].numel();
  }
  TROUPE_CHECK(at == g.numel, "unpack_fusion: the tensors do not fill the group");
}

}  // namespace troupe
