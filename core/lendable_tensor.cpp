// lendable_tensor: Note [Lent values] in core/lendable_tensor.hpp.
#include "core/lendable_tensor.hpp"

#include <atomic>

namespace troupe {

tensor& lendable_tensor::for_update() {
  if (value_.use_count() > 1) value_ = std::make_shared<tensor>(*value_);
  // use_count() is a relaxed load: the fence orders the last reply's reads (its release
  // decremented the count) before the caller's writes.
  std::atomic_thread_fence(std::memory_order_acquire);
  return *value_;
}

tensor lendable_tensor::lend() const {
  auto* keep = new std::shared_ptr<tensor>(value_);
  const buffer_release give_back{[](void* ctx, std::byte*) { delete static_cast<std::shared_ptr<tensor>*>(ctx); },
                                 keep};
  // const_cast: a lent tensor is only read (the contract of lend()).
  return tensor::adopt(const_cast<std::byte*>(value_->bytes()), give_back, value_->sizes(), value_->type(),
                       value_->where());
}

}  // namespace troupe
