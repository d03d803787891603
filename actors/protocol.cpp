// Tensor (de)serialization as raw blobs, error rendering, and type registration.
#include "actors/protocol.hpp"

#include <bit>

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

std::optional<errc> troupe_code(const caf::error& e) {
  if (!e || e.category() != caf::atom("troupe")) return std::nullopt;
  return static_cast<errc>(e.code());
}

std::string describe(const caf::error& e) {
  if (auto code = troupe_code(e)) {
    std::string out = to_string(*code);
    if (!e.context().empty() && e.context().match_elements<std::string>())
      out += ": " + e.context().get_as<std::string>(0);
    return out;
  }
  return caf::to_string(e);
}

void add_protocol_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<push_grads>("troupe.push_grads");
  cfg.add_message_type<push_ack>("troupe.push_ack");
  cfg.add_message_type<pull_request>("troupe.pull_request");
  cfg.add_message_type<params_reply>("troupe.params_reply");
  cfg.add_message_type<membership>("troupe.membership");
  cfg.add_message_type<shard_stats>("troupe.shard_stats");
  cfg.add_message_type<shard_join>("troupe.shard_join");
  cfg.add_message_type<shard_welcome>("troupe.shard_welcome");
  cfg.add_message_type<worker_join>("troupe.worker_join");
  cfg.add_message_type<worker_welcome>("troupe.worker_welcome");
  cfg.add_message_type<group_id>("troupe.group_id");
  cfg.add_message_type<activation>("troupe.activation");
  cfg.add_message_type<activation_grad>("troupe.activation_grad");
  cfg.add_message_type<member_joined>("troupe.member_joined");
  cfg.add_message_type<step_report>("troupe.step_report");
  cfg.add_message_type<worker_epoch>("troupe.worker_epoch");
  cfg.add_message_type<worker_done>("troupe.worker_done");
  cfg.add_message_type<eval_request>("troupe.eval_request");
  cfg.add_message_type<eval_reply>("troupe.eval_reply");
  cfg.add_message_type<job_result>("troupe.job_result");
  // (0.17's add_error_category<T> template does not compile; give the renderer directly.)
  cfg.add_error_category(caf::atom("troupe"), [](std::uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string out = "troupe: " + to_string(static_cast<errc>(code));
    if (!ctx.empty() && ctx.match_elements<std::string>()) out += ": " + ctx.get_as<std::string>(0);
    return out;
  });
}

}  // namespace troupe
