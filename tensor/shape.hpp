// A tensor shape: up to max_rank extents stored inline, so building or slicing a view
// never allocates. Row-major (C order) is the only layout the ops assume.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace troupe {

class shape {
 public:
  static constexpr int max_rank = 6;

  shape() = default;
  shape(std::initializer_list<std::int64_t> dims);
  explicit shape(std::span<const std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t& operator[](int i) { return dims_[i]; }
  const std::int64_t* begin() const { return dims_.data(); }
  const std::int64_t* end() const { return dims_.data() + rank_; }
  std::span<const std::int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }

  // Product of the extents; 1 for a rank-0 shape.
  std::int64_t numel() const;
  // The shape without its first extent (per-sample shape of a batch).
  shape drop_front() const;
  // A new shape with `n` prepended (a batch of this per-sample shape).
  shape prepend(std::int64_t n) const;
  // Row-major strides, in elements.
  std::array<std::int64_t, max_rank> contiguous_strides() const;

  std::string str() const;  // "(128, 784)"

  friend bool operator==(const shape& a, const shape& b);

 private:
  std::array<std::int64_t, max_rank> dims_{};
  int rank_ = 0;
};

}  // namespace troupe
