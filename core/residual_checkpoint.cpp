// residual_checkpoint: a member's residuals file (Note [Residuals in checkpoints]).
#include "core/residual_checkpoint.hpp"

#include "tensor/tensor_file.hpp"

namespace troupe {

bool keeps_residuals(const job_spec& job) {
  return job.mode == sync_mode::sync && job.compression.kind == codec_kind::two_bit && job.servers > 0 &&
         !job.checkpoints.dir.empty();
}

std::string residual_file_name(std::uint32_t rank) { return "member-" + std::to_string(rank) + ".tf"; }

std::optional<std::string> write_residual_image(const std::filesystem::path& path, const residual_image& r,
                                                const checkpoint_identity& id) {
  const nlohmann::json meta = {{"rank", r.rank}, {"step", r.step}, {"members", r.members}};
  return write_checkpoint_file(path, residuals_kind, id, meta, {{"residual", r.residual}});
}

expected<residual_image> read_residual_image(const std::filesystem::path& path, const checkpoint_identity& id) {
  auto file = read_checkpoint_file(path, residuals_kind, id);
  if (!file) return file.error();
  const std::string what = path.string() + ": ";
  const auto& m = file->meta;
  residual_image r;
  if (auto bad = read_description(path, "a member's residuals", [&] {
        r.rank = m.at("rank").get<std::uint32_t>();
        r.step = m.at("step").get<std::int64_t>();
        r.members = m.at("members").get<std::uint32_t>();
      }))
    return failure{*bad};
  const tensor* t = file->find("residual");
  if (!t || t->type() != dtype::f32 || t->rank() != 1) return failure{what + "it holds no f32 vector \"residual\""};
  r.residual = *t;
  return r;
}

std::vector<std::string> residual_files_in(const std::filesystem::path& dir, std::uint32_t members) {
  std::vector<std::string> out;
  for (std::uint32_t r = 0; r < members; ++r) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir / residual_file_name(r), ec)) out.push_back(residual_file_name(r));
  }
  return out;
}

}  // namespace troupe
