// kv_checkpoint: a key-value shard's checkpoint file and the keys of a job's state (Note
// [Key-value checkpoints] in the header).
#include "core/kv_checkpoint.hpp"

#include <algorithm>
#include <set>

#include "tensor/tensor_file.hpp"

namespace troupe {

namespace {

nlohmann::json optimizer_json(const kv_shard_image& s) {
  if (!s.has_optimizer) return nullptr;
  const optimizer_config& o = s.optimizer;
  const lr_schedule& l = s.schedule;
  return {{"kind", std::string(name_of(o.kind))},
          {"momentum", o.momentum},
          {"nesterov", o.nesterov},
          {"weight_decay", o.weight_decay},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"schedule",
           {{"kind", std::string(name_of(l.kind))},
            {"base", l.base},
            {"warmup_steps", l.warmup_steps},
            {"total_steps", l.total_steps},
            {"final_fraction", l.final_fraction}}}};
}

// Throws nlohmann::json::exception for a field that is missing or of the wrong type.
void read_optimizer(const nlohmann::json& j, kv_shard_image& s) {
  if (j.is_null()) return;
  s.has_optimizer = true;
  auto kind = parse_optimizer_kind(j.at("kind").get<std::string>());
  auto schedule = parse_lr_schedule_kind(j.at("schedule").at("kind").get<std::string>());
  if (!kind || !schedule) throw nlohmann::json::other_error::create(501, "an unknown optimizer or schedule", &j);
  s.optimizer = {*kind,
                 j.at("momentum").get<float>(),
                 j.at("nesterov").get<bool>(),
                 j.at("weight_decay").get<float>(),
                 j.at("beta1").get<float>(),
                 j.at("beta2").get<float>(),
                 j.at("eps").get<float>()};
  const auto& l = j.at("schedule");
  s.schedule = {*schedule, l.at("base").get<float>(), l.at("warmup_steps").get<std::int64_t>(),
                l.at("total_steps").get<std::int64_t>(), l.at("final_fraction").get<float>()};
}

std::string section(const char* what, kv_part_id id) { return std::string(what) + ":" + std::to_string(id); }

}  // namespace

std::string kv_shard_file_name(std::uint32_t shard) { return "kv-shard-" + std::to_string(shard) + ".tf"; }

std::optional<std::string> write_kv_shard_image(const std::filesystem::path& path, const kv_shard_image& s,
                                                const checkpoint_identity& id) {
  nlohmann::json parts = nlohmann::json::array();
  std::vector<std::pair<std::string, const_tensor_view>> sections;
  for (const auto& p : s.parts) {
    parts.push_back({{"id", p.id}, {"key", p.key}, {"version", p.version}, {"steps", p.optimizer_steps}});
    sections.emplace_back(section("value", p.id), p.value);
    if (!p.slot1.empty()) sections.emplace_back(section("slot1", p.id), p.slot1);
    if (!p.slot2.empty()) sections.emplace_back(section("slot2", p.id), p.slot2);
  }
  const nlohmann::json meta = {
      {"shard", s.shard}, {"step", s.step}, {"optimizer", optimizer_json(s)}, {"parts", parts}};
  return write_checkpoint_file(path, kv_shard_state_kind, id, meta, sections);
}

expected<kv_shard_image> read_kv_shard_image(const std::filesystem::path& path, const checkpoint_identity& id) {
  auto file = read_checkpoint_file(path, kv_shard_state_kind, id);
  if (!file) return file.error();
  const std::string what = path.string() + ": ";
  const auto& m = file->meta;
  kv_shard_image s;
  if (auto bad = read_description(path, "a key-value shard's state", [&] {
        s.shard = m.at("shard").get<std::uint32_t>();
        s.step = m.at("step").get<std::int64_t>();
        read_optimizer(m.at("optimizer"), s);
        for (const auto& p : m.at("parts")) {
          kv_part_image part;
          part.id = p.at("id").get<kv_part_id>();
          part.key = p.at("key").get<std::string>();
          part.version = p.at("version").get<std::int64_t>();
          part.optimizer_steps = p.at("steps").get<std::int64_t>();
          s.parts.push_back(std::move(part));
        }
      }))
    return failure{*bad};
  for (auto& p : s.parts) {
    const tensor* value = file->find(section("value", p.id));
    if (!value || value->type() != dtype::f32 || value->rank() != 1)
      return failure{what + "part " + std::to_string(p.id) + " has no float32 value"};
    p.value = *value;
    for (auto [slot, name] : {std::pair{&p.slot1, "slot1"}, std::pair{&p.slot2, "slot2"}})
      if (const tensor* t = file->find(section(name, p.id))) {
        if (t->type() != dtype::f32 || t->numel() != value->numel())
          return failure{what + "part " + std::to_string(p.id) + "'s " + name + " does not match its value"};
        *slot = *t;
      }
  }
  return s;
}

nlohmann::json keys_to_json(const std::vector<kv_key_layout>& keys) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& k : keys) {
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& p : k.parts)
      parts.push_back(
          {{"id", p.id}, {"shard", p.shard}, {"row_begin", p.row_begin}, {"rows", p.rows}, {"numel", p.numel}});
    out.push_back({{"id", k.id}, {"name", k.name}, {"dims", k.dims}, {"parts", parts}});
  }
  return out;
}

expected<std::vector<kv_key_layout>> keys_from_json(const nlohmann::json& j) {
  std::vector<kv_key_layout> keys;
  try {
    for (const auto& k : j) {
      kv_key_layout key;
      key.id = k.at("id").get<std::uint32_t>();
      key.name = k.at("name").get<std::string>();
      key.dims = k.at("dims").get<std::vector<std::int64_t>>();
      for (const auto& p : k.at("parts"))
        key.parts.push_back({p.at("id").get<kv_part_id>(), p.at("shard").get<std::uint32_t>(),
                             p.at("row_begin").get<std::int64_t>(), p.at("rows").get<std::int64_t>(),
                             p.at("numel").get<std::int64_t>()});
      keys.push_back(std::move(key));
    }
  } catch (const nlohmann::json::exception&) {
    return failure{"its keys are not a key-value job's registry"};
  }
  return keys;
}

std::vector<kv_key_layout> keys_held_whole(const std::vector<kv_key_layout>& keys,
                                           const std::vector<std::vector<kv_part_id>>& parts_by_shard) {
  std::vector<std::set<kv_part_id>> held;
  for (const auto& parts : parts_by_shard) held.emplace_back(parts.begin(), parts.end());
  std::vector<kv_key_layout> out;
  for (const auto& k : keys)
    if (std::all_of(k.parts.begin(), k.parts.end(),
                    [&](const kv_part& p) { return p.shard < held.size() && held[p.shard].count(p.id); }))
      out.push_back(k);
  return out;
}

}  // namespace troupe
