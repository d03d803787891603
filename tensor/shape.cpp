// shape: construction, element counts and formatting.
#include "tensor/shape.hpp"

#include "base/check.hpp"

namespace troupe {

shape::shape(std::initializer_list<std::int64_t> dims)
    : shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

shape::shape(std::span<const std::int64_t> dims) {
  TROUPE_CHECK(dims.size() <= static_cast<size_t>(max_rank), "shape rank above max_rank");
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) {
    TROUPE_CHECK(dims[i] >= 0, "negative extent");
    dims_[i] = dims[i];
  }
}

std::int64_t shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

shape shape::drop_front() const {
  TROUPE_CHECK(rank_ > 0, "drop_front on a rank-0 shape");
  return shape(std::span<const std::int64_t>(dims_.data() + 1, rank_ - 1));
}

shape shape::prepend(std::int64_t n) const {
  TROUPE_CHECK(rank_ < max_rank, "prepend would exceed max_rank");
  shape s;
  s.rank_ = rank_ + 1;
  s.dims_[0] = n;
  for (int i = 0; i < rank_; ++i) s.dims_[i + 1] = dims_[i];
  return s;
}

std::array<std::int64_t, shape::max_rank> shape::contiguous_strides() const {
  std::array<std::int64_t, max_rank> st{};
  std::int64_t s = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    st[i] = s;
    s *= dims_[i];
  }
  return st;
}

std::string shape::str() const {
  std::string out = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[i]);
  }
  return out + ")";
}

bool operator==(const shape& a, const shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[i] != b.dims_[i]) return false;
  return true;
}

}  // namespace troupe
