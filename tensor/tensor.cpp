// tensor: aligned host allocation, deep copy, adoption of foreign buffers.
#include "tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace troupe {

namespace {

std::byte* alloc_host(std::size_t nbytes, bool zero) {
  // aligned_alloc wants a size that is a multiple of the alignment; never ask for 0.
  std::size_t rounded = (nbytes + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
  if (rounded == 0) rounded = tensor_alignment;
  void* p = std::aligned_alloc(tensor_alignment, rounded);
  if (!p) throw std::bad_alloc();
  if (zero) std::memset(p, 0, rounded);
  return static_cast<std::byte*>(p);
}

}  // namespace

void tensor::free_host(std::byte* p) { std::free(p); }

tensor::tensor(troupe::shape s, dtype t)
    : data_(alloc_host(static_cast<std::size_t>(s.numel()) * size_of(t), true), &free_host), type_(t), shape_(s) {}

tensor tensor::uninitialized(troupe::shape s, dtype t) {
  tensor out;
  out.data_ = std::unique_ptr<std::byte, deleter>(alloc_host(static_cast<std::size_t>(s.numel()) * size_of(t), false),
                                                  &free_host);
  out.type_ = t;
  out.shape_ = s;
  return out;
}

tensor tensor::adopt(std::byte* data, deleter del, troupe::shape s, dtype t, device d) {
  tensor out;
  out.data_ = std::unique_ptr<std::byte, deleter>(data, del);
  out.type_ = t;
  out.shape_ = s;
  out.device_ = d;
  return out;
}

tensor::tensor(const tensor& other) : type_(other.type_), shape_(other.shape_), device_(other.device_) {
  if (other.empty()) return;
  TROUPE_CHECK(other.device_.kind == device_kind::cpu, "copy device tensors through their backend");
  data_ = std::unique_ptr<std::byte, deleter>(alloc_host(other.nbytes(), false), &free_host);
  std::memcpy(data_.get(), other.data_.get(), other.nbytes());
}

tensor& tensor::operator=(const tensor& other) {
  if (this != &other) *this = tensor(other);
  return *this;
}

void tensor::reshape(troupe::shape s) {
  TROUPE_CHECK(s.numel() == shape_.numel(), "reshape " + shape_.str() + " -> " + s.str() + " changes numel");
  shape_ = s;
}

void tensor::fill_zero() {
  TROUPE_CHECK(device_.kind == device_kind::cpu, "fill_zero on a device tensor");
  if (data_) std::memset(data_.get(), 0, nbytes());
}

void copy(tensor_view dst, const_tensor_view src) {
  TROUPE_CHECK(dst.type() == src.type() && dst.numel() == src.numel(), "copy: dtype or numel mismatch");
  TROUPE_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy: views must be contiguous");
  TROUPE_CHECK(dst.where().kind == device_kind::cpu && src.where().kind == device_kind::cpu,
               "copy: host views only");
  if (src.nbytes()) std::memmove(dst.bytes(), src.bytes(), src.nbytes());
}

}  // namespace troupe
