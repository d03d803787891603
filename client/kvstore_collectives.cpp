// kvstore: the collective calls of a user's loop (allreduce, broadcast, allgather): the
// arrays checked and the call named (by the user, or by its place in the store's order),
// then run by client/collectives.cpp.
#include <mutex>
#include <string>

#include "client/kvstore_impl.hpp"

namespace troupe::kv {

collective_call kvstore::impl::collective(const std::string& what, const std::string& name) {
  std::lock_guard lock(mu);
  check_open();
  collective_call c;
  c.name = name.empty() ? what + "#" + std::to_string(unnamed_collectives++) : "user:" + name;
  c.timeout = opts.timeout;
  return c;
}

void kvstore::allreduce(const const_array& in, const array& out, reduction op, const std::string& name) {
  const auto call = impl_->collective("allreduce", name);
  if (!in.data || !out.data) raise(fault{errc::bad_shape, "allreduce: no data"});
  if (in.shape != out.shape)
    raise(fault{errc::bad_shape,
                "allreduce: the input has shape " + dims_str(in.shape) + " but the output " + dims_str(out.shape)});
  const reduce_op r = op == reduction::sum       ? reduce_op::sum
                      : op == reduction::max     ? reduce_op::max
                      : op == reduction::min     ? reduce_op::min
                      : op == reduction::product ? reduce_op::product
                                                 : reduce_op::avg;
  impl::blocked_scope blocked{*impl_};
  if (auto f = run_allreduce(*impl_->t, call, in.data, out.data, numel_of(in.shape), r)) raise(*f);
}

void kvstore::broadcast(const array& value, std::uint32_t root, const std::string& name) {
  const auto call = impl_->collective("broadcast", name);
  if (!value.data) raise(fault{errc::bad_shape, "broadcast: no data"});
  impl::blocked_scope blocked{*impl_};
  if (auto f = run_broadcast(*impl_->t, call, value.data, numel_of(value.shape), root)) raise(*f);
}

kvstore::gathered kvstore::allgather(const const_array& in, const std::string& name) {
  const auto call = impl_->collective("allgather", name);
  if (!in.data && numel_of(in.shape) > 0) raise(fault{errc::bad_shape, "allgather: no data"});
  impl::blocked_scope blocked{*impl_};
  auto r = run_allgather(*impl_->t, call, in.data, in.shape);
  if (auto* f = std::get_if<fault>(&r)) raise(*f);
  auto& g = std::get<gathered_tensor>(r);
  return {std::move(g.data), std::move(g.dims), std::move(g.ranks), std::move(g.rows)};
}

}  // namespace troupe::kv
