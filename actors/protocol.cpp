// Error rendering and type registration.
#include "actors/protocol.hpp"

namespace troupe {

std::optional<errc> troupe_code(const caf::error& e) {
  if (!e || e.category() != caf::atom("troupe")) return std::nullopt;
  return static_cast<errc>(e.code());
}

std::optional<fault> as_fault(const caf::error& e) {
  auto code = troupe_code(e);
  if (!code) return std::nullopt;
  fault f{*code, {}};
  if (!e.context().empty() && e.context().match_elements<std::string>()) f.detail = e.context().get_as<std::string>(0);
  return f;
}

std::string describe(const caf::error& e) {
  if (auto f = as_fault(e)) return to_string(*f);
  return caf::to_string(e);
}

caf::error not_a_kv_job() {
  return make_error(errc::bad_job, "this job trains a built-in model; key-value calls need a job started with "
                                   "`troupe launch ... -- COMMAND`");
}

member_identity identity_of(const caf::strong_actor_ptr& actor) {
  if (!actor) return {};
  return {actor->node(), actor->id()};
}

bool sent_by(const caf::strong_actor_ptr& sender, const member_identity& who) {
  return sender && who.id != 0 && sender->id() == who.id && sender->node() == who.node;
}

void add_protocol_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::troupe_protocol>();
  // (0.17's add_error_category<T> template does not compile; give the renderer directly.)
  cfg.add_error_category(caf::atom("troupe"), [](std::uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string out = "troupe: " + to_string(static_cast<errc>(code));
    if (!ctx.empty() && ctx.match_elements<std::string>()) out += ": " + ctx.get_as<std::string>(0);
    return out;
  });
}

}  // namespace troupe
