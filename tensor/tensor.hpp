// tensor (owning, RAII, 64-byte aligned) and tensor_view / const_tensor_view (borrowing).
// A tensor owns one contiguous buffer plus dtype, shape and device tag; copying it copies
// the bytes, moving it moves the buffer. Views carry strides, but every op in tensor/
// requires contiguous views and says so in its preconditions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "base/check.hpp"
#include "tensor/dtype.hpp"
#include "tensor/shape.hpp"

namespace troupe {

inline constexpr std::size_t tensor_alignment = 64;

// What a tensor and a view both know of their elements, with its accessors: the dtype,
// the shape and the device.
class tensor_layout {
 public:
  dtype type() const { return type_; }
  const troupe::shape& sizes() const { return shape_; }
  std::int64_t size(int i) const { return shape_[i]; }
  int rank() const { return shape_.rank(); }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * size_of(type_); }
  device where() const { return device_; }

 protected:
  tensor_layout() = default;
  tensor_layout(dtype t, troupe::shape s, device d) : type_(t), shape_(s), device_(d) {}

  dtype type_ = dtype::f32;
  troupe::shape shape_;
  device device_ = cpu_device;
};

template <bool Const>
class basic_view : public tensor_layout {
 public:
  using byte_ptr = std::conditional_t<Const, const std::byte*, std::byte*>;
  template <class T>
  using elem_ptr = std::conditional_t<Const, const T*, T*>;

  basic_view() = default;
  // A contiguous view of `s` elements of type `t` starting at `data`.
  basic_view(byte_ptr data, dtype t, troupe::shape s, device d = cpu_device)
      : tensor_layout(t, s, d), data_(data), strides_(s.contiguous_strides()) {}
  template <class T>
  basic_view(elem_ptr<T> data, troupe::shape s)
      : basic_view(reinterpret_cast<byte_ptr>(data), dtype_of<std::remove_const_t<T>>::value, s) {}
  // A mutable view converts to a const one, never the other way round.
  template <bool C2, class = std::enable_if_t<Const && !C2>>
  basic_view(const basic_view<C2>& o)
      : tensor_layout(o.type(), o.sizes(), o.where()), data_(o.bytes()), strides_(o.strides()) {}

  // Typed element pointer; the dtype must match T.
  template <class T>
  elem_ptr<T> data() const {
    TROUPE_CHECK(type_ == dtype_of<T>::value, "view dtype is " + std::string(name_of(type_)));
    return reinterpret_cast<elem_ptr<T>>(data_);
  }
  byte_ptr bytes() const { return data_; }
  const std::array<std::int64_t, troupe::shape::max_rank>& strides() const { return strides_; }
  bool empty() const { return data_ == nullptr; }
  bool is_contiguous() const { return strides_ == shape_.contiguous_strides(); }

  // Rows [begin, end) along the first dimension; still contiguous if this view is.
  basic_view slice(std::int64_t begin, std::int64_t end) const {
    TROUPE_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice out of range");
    basic_view v = *this;
    v.shape_[0] = end - begin;
    v.data_ = data_ + begin * strides_[0] * static_cast<std::int64_t>(size_of(type_));
    return v;
  }
  // Same elements, new shape; only for contiguous views.
  basic_view reshape(troupe::shape s) const {
    TROUPE_CHECK(is_contiguous(), "reshape of a strided view");
    TROUPE_CHECK(s.numel() == numel(), "reshape " + shape_.str() + " -> " + s.str() + " changes numel");
    return basic_view(data_, type_, s, device_);
  }
  // A flat 1-D view of elements [offset, offset + count).
  basic_view flat(std::int64_t offset, std::int64_t count) const {
    TROUPE_CHECK(is_contiguous() && offset >= 0 && count >= 0 && offset + count <= numel(),
                 "flat range out of bounds");
    return basic_view(data_ + offset * static_cast<std::int64_t>(size_of(type_)), type_, {count}, device_);
  }

 private:
  byte_ptr data_ = nullptr;
  std::array<std::int64_t, troupe::shape::max_rank> strides_{};
};

using tensor_view = basic_view<false>;
using const_tensor_view = basic_view<true>;

// How a tensor gives its buffer back: fn(ctx, data). Host tensors free their aligned
// allocation; a backend's tensors go back to that backend's allocator.
struct buffer_release {
  void (*fn)(void* ctx, std::byte* data) = nullptr;
  void* ctx = nullptr;
  void operator()(std::byte* p) const {
    if (p && fn) fn(ctx, p);
  }
};

class tensor : public tensor_layout {
 public:
  using deleter = void (*)(std::byte*);

  tensor() = default;
  // Host tensor, zero-filled, 64-byte aligned.
  explicit tensor(troupe::shape s, dtype t = dtype::f32);
  // Host tensor whose contents are unspecified: for buffers the caller overwrites whole.
  static tensor uninitialized(troupe::shape s, dtype t = dtype::f32);
  // Takes ownership of memory allocated elsewhere (a device backend); `del` frees it.
  static tensor adopt(std::byte* data, deleter del, troupe::shape s, dtype t, device d);
  static tensor adopt(std::byte* data, buffer_release release, troupe::shape s, dtype t, device d);

  tensor(const tensor& other);  // deep copy; host tensors only
  tensor& operator=(const tensor& other);
  tensor(tensor&&) noexcept = default;
  tensor& operator=(tensor&&) noexcept = default;

  tensor_view view() { return {data_.get(), type_, shape_, device_}; }
  const_tensor_view view() const { return {data_.get(), type_, shape_, device_}; }
  operator tensor_view() { return view(); }
  operator const_tensor_view() const { return view(); }

  template <class T>
  T* data() { return view().data<T>(); }
  template <class T>
  const T* data() const { return view().data<T>(); }
  std::byte* bytes() { return data_.get(); }
  const std::byte* bytes() const { return data_.get(); }
  bool empty() const { return !data_; }

  // Changes the shape in place; the element count must stay the same.
  void reshape(troupe::shape s);
  void fill_zero();

 private:
  static void free_host(void*, std::byte* p);
  std::unique_ptr<std::byte, buffer_release> data_{nullptr, buffer_release{&free_host, nullptr}};
};

// The elements a tensor's or view's memory holds: 0 without memory, else numel(). A
// default tensor (the wire's "no tensor", or one moved from) has a scalar's shape, so
// numel() alone says 1; a size check on a tensor a peer sent compares held_numel().
inline std::int64_t held_numel(const tensor& t) { return t.empty() ? 0 : t.numel(); }
template <bool Const>
std::int64_t held_numel(const basic_view<Const>& v) {
  return v.empty() ? 0 : v.numel();
}

// Copies `src` into `dst`; both host, contiguous, same dtype and numel, and both with
// memory unless they hold no elements.
void copy(tensor_view dst, const_tensor_view src);

}  // namespace troupe
