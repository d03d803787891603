// Tensor (de)serialization as raw blobs (Note [Tensors on the wire] in wire.hpp).
#include "actors/wire.hpp"

#include <bit>

#include "actors/protocol.hpp"

namespace troupe {

namespace {

constexpr std::uint8_t host_byte_order = std::endian::native == std::endian::little ? 1 : 2;
constexpr std::uint8_t empty_rank = 0xff;

}  // namespace

caf::error inspect(caf::serializer& f, tensor& x) {
  std::uint8_t type = static_cast<std::uint8_t>(x.type());
  std::uint8_t order = host_byte_order;
  std::uint8_t rank = x.empty() ? empty_rank : static_cast<std::uint8_t>(x.rank());
  if (auto err = f(type, order, rank)) return err;
  if (x.empty()) return caf::none;
  if (x.where().kind != device_kind::cpu) return make_error(errc::malformed, "cannot send a device tensor");
  for (int i = 0; i < x.rank(); ++i) {
    std::int64_t d = x.size(i);
    if (auto err = f(d)) return err;
  }
  std::uint64_t nbytes = x.nbytes();
  if (auto err = f(nbytes)) return err;
  return nbytes > 0 ? f.apply_raw(nbytes, x.bytes()) : caf::none;
}

caf::error inspect(caf::deserializer& f, tensor& x) {
  std::uint8_t type = 0, order = 0, rank = 0;
  if (auto err = f(type, order, rank)) return err;
  if (rank == empty_rank) {
    x = tensor();
    return caf::none;
  }
  const auto dt = dtype_from_byte(type);
  if (!dt) return make_error(errc::malformed, "unknown tensor dtype " + std::to_string(type));
  if (order != host_byte_order)
    return make_error(errc::malformed, "tensor from a peer with another byte order; Troupe nodes must share one");
  if (rank > shape::max_rank) return make_error(errc::malformed, "tensor rank " + std::to_string(rank));
  std::vector<std::int64_t> dims(rank);
  std::uint64_t numel = 1;
  for (auto& d : dims) {
    if (auto err = f(d)) return err;
    if (d < 0 || static_cast<std::uint64_t>(d) > max_wire_tensor_bytes)
      return make_error(errc::malformed, "tensor extent " + std::to_string(d));
    numel *= static_cast<std::uint64_t>(d);
    if (numel > max_wire_tensor_bytes) return make_error(errc::malformed, "tensor larger than the wire limit");
  }
  std::uint64_t nbytes = 0;
  if (auto err = f(nbytes)) return err;
  if (nbytes != numel * size_of(*dt))
    return make_error(errc::malformed, "tensor byte count " + std::to_string(nbytes) + " does not match its shape");
  if (nbytes > max_wire_tensor_bytes) return make_error(errc::malformed, "tensor larger than the wire limit");
  x = tensor::uninitialized(shape(std::span<const std::int64_t>(dims)), *dt);
  return nbytes > 0 ? f.apply_raw(nbytes, x.bytes()) : caf::none;
}

}  // namespace troupe
