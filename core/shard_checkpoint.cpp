// shard_checkpoint: a shard's checkpoint file and resharding (Note [Shard checkpoints]).
#include "core/shard_checkpoint.hpp"

#include <algorithm>

#include "tensor/tensor_file.hpp"

namespace troupe {

std::string shard_file_name(std::uint32_t shard) { return "shard-" + std::to_string(shard) + ".tf"; }

std::optional<std::string> write_shard_image(const std::filesystem::path& path, const shard_image& s,
                                             const checkpoint_identity& id) {
  nlohmann::json ranges = nlohmann::json::array(), stages = nlohmann::json::array();
  for (const auto& [off, len] : s.ranges) ranges.push_back({off, len});
  for (const auto& [stage, steps] : s.stage_steps) stages.push_back({stage, steps});
  const nlohmann::json meta = {{"shard", s.shard},
                               {"step", s.step},
                               {"version", s.version},
                               {"ranges", ranges},
                               {"optimizer_steps", s.optimizer_steps},
                               {"stage_steps", stages}};
  std::vector<std::pair<std::string, const_tensor_view>> sections{{"params", s.params}, {"slot1", s.slot1}};
  if (!s.slot2.empty()) sections.emplace_back("slot2", s.slot2);
  return write_checkpoint_file(path, shard_state_kind, id, meta, sections);
}

expected<shard_image> read_shard_image(const std::filesystem::path& path, const checkpoint_identity& id) {
  auto file = read_checkpoint_file(path, shard_state_kind, id);
  if (!file) return file.error();
  const std::string what = path.string() + ": ";
  const auto& m = file->meta;
  shard_image s;
  if (auto bad = read_description(path, "a shard's state", [&] {
        s.shard = m.at("shard").get<std::uint32_t>();
        s.step = m.at("step").get<std::int64_t>();
        s.version = m.at("version").get<std::int64_t>();
        s.optimizer_steps = m.at("optimizer_steps").get<std::int64_t>();
        for (const auto& r : m.at("ranges"))
          s.ranges.emplace_back(r.at(0).get<std::int64_t>(), r.at(1).get<std::int64_t>());
        for (const auto& r : m.at("stage_steps"))
          s.stage_steps[r.at(0).get<std::uint32_t>()] = r.at(1).get<std::int64_t>();
      }))
    return failure{*bad};
  std::int64_t numel = 0;
  for (const auto& [off, len] : s.ranges) {
    if (off < 0 || len < 0 || off > id.num_params - len) return failure{what + "a range reaches outside the model"};
    numel += len;
  }
  for (auto& [name, t] : file->sections) {
    tensor* slot = name == "params" ? &s.params : name == "slot1" ? &s.slot1 : name == "slot2" ? &s.slot2 : nullptr;
    if (!slot) continue;
    if (t.type() != dtype::f32 || t.numel() != numel)
      return failure{what + "its section " + name + " holds " + std::to_string(t.numel()) +
                     " values where its ranges hold " + std::to_string(numel)};
    *slot = std::move(t);
  }
  if (s.params.empty() || s.slot1.empty()) return failure{what + "it lacks the parameters or the optimizer's state"};
  if ((id.optimizer == "adam") != !s.slot2.empty())
    return failure{what + "its optimizer slots do not match optimizer " + id.optimizer};
  return s;
}

expected<shard_image> reshard(const std::vector<shard_image>& old, const std::vector<key_range>& ranges,
                              std::int64_t num_params) {
  if (old.empty()) return failure{"no shard's state to start from"};
  const bool adam = !old.front().slot2.empty();
  tensor params = tensor::uninitialized({num_params}), slot1 = tensor::uninitialized({num_params});
  tensor slot2 = adam ? tensor::uninitialized({num_params}) : tensor();
  std::vector<std::pair<std::int64_t, std::int64_t>> covered;
  shard_image out;
  for (const auto& s : old) {
    if (!s.slot2.empty() != adam) return failure{"the shards' states disagree on the optimizer"};
    std::int64_t pos = 0;
    for (const auto& [off, len] : s.ranges) {
      copy(params.view().flat(off, len), s.params.view().flat(pos, len));
      copy(slot1.view().flat(off, len), s.slot1.view().flat(pos, len));
      if (adam) copy(slot2.view().flat(off, len), s.slot2.view().flat(pos, len));
      covered.emplace_back(off, len);
      pos += len;
    }
    out.version = std::max(out.version, s.version);
    out.optimizer_steps = std::max(out.optimizer_steps, s.optimizer_steps);
    for (const auto& [stage, steps] : s.stage_steps) out.stage_steps[stage] = std::max(out.stage_steps[stage], steps);
    out.step = s.step;
  }
  std::sort(covered.begin(), covered.end());
  std::int64_t end = 0;
  for (const auto& [off, len] : covered) {
    if (off != end)
      return failure{"the shards' states do not cover the model exactly once (at float " +
                     std::to_string(std::min(off, end)) + ")"};
    end = off + len;
  }
  if (end != num_params)
    return failure{"the shards' states cover " + std::to_string(end) + " of the model's " + std::to_string(num_params) +
                   " parameters"};
  std::int64_t numel = 0;
  for (const auto& r : ranges) {
    out.ranges.emplace_back(r.offset, r.length);
    numel += r.length;
  }
  out.params = tensor::uninitialized({numel});
  out.slot1 = tensor::uninitialized({numel});
  if (adam) out.slot2 = tensor::uninitialized({numel});
  pack_shard(out.params, params, ranges);
  pack_shard(out.slot1, slot1, ranges);
  if (adam) pack_shard(out.slot2, slot2, ranges);
  out.shard = ranges.empty() ? 0 : ranges.front().shard;
  return out;
}

expected<shard_image> image_for(const std::filesystem::path& dir, const std::vector<std::string>& files,
                                std::optional<std::size_t> own, const std::vector<key_range>& ranges,
                                const checkpoint_identity& id) {
  if (own && *own < files.size()) {
    auto mine = read_shard_image(dir / files[*own], id);
    if (!mine) return mine.error();
    std::vector<std::pair<std::int64_t, std::int64_t>> wanted;
    for (const auto& r : ranges) wanted.emplace_back(r.offset, r.length);
    if (mine->ranges == wanted) return mine;
  }
  std::vector<shard_image> old;
  for (const auto& f : files) {
    auto s = read_shard_image(dir / f, id);
    if (!s) return s.error();
    old.push_back(std::move(*s));
  }
  return reshard(old, ranges, id.num_params);
}

}  // namespace troupe
