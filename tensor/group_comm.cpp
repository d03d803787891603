// group_comm: the backend's collective entries behind RAII and backend_error.
#include "tensor/group_comm.hpp"

namespace troupe {

namespace {

void require_collectives(const backend_context& b) {
  const auto& t = b.table();
  if (!t.collective_id || !t.collective_open || !t.collective_close || !t.all_reduce_sum)
    throw backend_error(std::string(t.name) + " backend has no collectives");
}

}  // namespace

std::vector<std::uint8_t> group_comm::new_id(const backend_context& b) {
  require_collectives(b);
  std::vector<std::uint8_t> id(256);
  std::size_t size = 0;
  if (b.table().collective_id(id.data(), id.size(), &size) != 0)
    throw backend_error(to_string(b.where()) + ": collective_id failed: " + b.table().last_error());
  id.resize(size);
  return id;
}

group_comm::group_comm(const backend_context& b, const std::vector<std::uint8_t>& id, int ranks, int rank,
                       std::chrono::milliseconds timeout)
    : b_(b), ranks_(ranks), rank_(rank) {
  require_collectives(b);
  b.call("collective_open", &troupe_backend_v1::collective_open, id.data(), id.size(), ranks, rank,
         static_cast<std::int64_t>(timeout.count()), &comm_);
}

group_comm::~group_comm() {
  if (comm_) b_.table().collective_close(comm_);
}

void group_comm::all_reduce_sum(const std::vector<tensor_view>& buffers) {
  std::vector<float*> ptrs;
  std::vector<std::int64_t> counts;
  for (const auto& v : buffers) {
    TROUPE_CHECK(v.type() == dtype::f32 && v.is_contiguous(), "all_reduce_sum: contiguous f32 buffers only");
    ptrs.push_back(reinterpret_cast<float*>(v.bytes()));
    counts.push_back(v.numel());
  }
  b_.call("all_reduce_sum", &troupe_backend_v1::all_reduce_sum, comm_, static_cast<float* const*>(ptrs.data()),
          static_cast<const std::int64_t*>(counts.data()), static_cast<int>(ptrs.size()));
}

}  // namespace troupe
