// lane: a payload's descriptor in its message, and the payload shaped by it.
#include "transport/lane.hpp"

#include <climits>
#include <span>

namespace troupe::lane {

lane_tensor describe(std::uint64_t ticket, const tensor& t) {
  lane_tensor d{ticket, static_cast<std::uint8_t>(t.type()), {}};
  for (int i = 0; i < t.rank(); ++i) d.dims.push_back(t.size(i));
  return d;
}

expected<tensor> shaped(tensor payload, const lane_tensor& d) {
  const auto type = dtype_from_byte(d.dtype);
  if (!type || *type != payload.type())
    return failure{"its message names a " + std::string(type ? name_of(*type) : "unknown") +
                   " tensor but its lane payload holds " + std::string(name_of(payload.type()))};
  if (d.dims.empty() || d.dims.size() > static_cast<std::size_t>(shape::max_rank))
    return failure{"its message names a tensor of rank " + std::to_string(d.dims.size())};
  std::int64_t n = 1;
  for (auto x : d.dims) {
    if (x < 0 || (x > 0 && n > INT64_MAX / x)) return failure{"its message names a tensor of impossible extents"};
    n *= x;
  }
  if (n != payload.numel())
    return failure{"its message names " + std::to_string(n) + " elements but its lane payload holds " +
                   std::to_string(payload.numel())};
  payload.reshape(shape(std::span<const std::int64_t>(d.dims)));
  return payload;
}

}  // namespace troupe::lane
