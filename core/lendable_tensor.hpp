// lendable_tensor: a shard's value that replies can carry without a copy.
//
// Note [Lent values]
// A pull answered over the network is serialized by CAF's middleman after the shard's
// handler returns. Rather than copy the value into the reply, lend() gives the reply a
// tensor that shares the value's memory and keeps it alive until the reply is gone. An
// update that comes while the value is lent writes to a fresh copy (for_update(); the
// shard then owns the copy, the reply keeps the old memory), so a reply never sees a torn
// value and costs a copy only when an update overtakes it. A shared_ptr's count says
// whether any reply still holds the value; a lent tensor's release drops its share from
// whatever thread destroys the reply.
#pragma once

#include <memory>

#include "tensor/tensor.hpp"

namespace troupe {

class lendable_tensor {
 public:
  lendable_tensor() = default;
  explicit lendable_tensor(tensor t) : value_(std::make_shared<tensor>(std::move(t))) {}

  bool empty() const { return !value_; }
  const tensor& get() const { return *value_; }
  // The value to update in place: the current one when no reply holds it, else a copy
  // that replaces it (the replies keep the old one).
  tensor& for_update();
  // A tensor sharing the value's memory, for a reply: read-only, and may outlive this.
  tensor lend() const;

 private:
  std::shared_ptr<tensor> value_;
};

}  // namespace troupe
