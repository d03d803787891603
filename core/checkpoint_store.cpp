// checkpoint_store: checkpoint directories, manifests, retention and the search for the
// newest good checkpoint (Note [Checkpoint directory]).
#include "core/checkpoint_store.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "base/durable_file.hpp"
#include "tensor/tensor_file.hpp"

namespace troupe {

namespace {

constexpr const char* manifest_name = "MANIFEST.tf";
constexpr const char* manifest_kind = "troupe-manifest";
constexpr const char* prefix = "ckpt-";
constexpr std::size_t digits = 12;

// The step a directory name "ckpt-NNNNNNNNNNNN" stands for; nullopt for any other name.
std::optional<std::int64_t> step_of(const std::string& name) {
  if (name.size() != std::string(prefix).size() + digits || name.rfind(prefix, 0) != 0) return std::nullopt;
  std::int64_t v = 0;
  for (std::size_t i = std::string(prefix).size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// Every step with a directory, complete or not, newest first.
std::vector<std::int64_t> steps_in(const std::filesystem::path& dir) {
  std::vector<std::int64_t> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (auto s = step_of(it->path().filename().string()); s && it->is_directory(ec)) out.push_back(*s);
  std::sort(out.rbegin(), out.rend());
  return out;
}

bool plain_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos && f != manifest_name;
}

}  // namespace

checkpoint_store::checkpoint_store(std::filesystem::path dir, int keep) : dir_(std::move(dir)), keep_(std::max(1, keep)) {}

std::filesystem::path checkpoint_store::step_dir(std::int64_t step) const {
  char name[32];
  std::snprintf(name, sizeof name, "%s%012lld", prefix, static_cast<long long>(step));
  return dir_ / name;
}

expected<std::filesystem::path> checkpoint_store::begin(std::int64_t step) const {
  if (step < 0 || step > 999999999999LL) return failure{"a checkpoint's step must be 0 to 999999999999"};
  const auto d = step_dir(step);
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec) return failure{"cannot create the checkpoint directory " + d.string() + ": " + ec.message()};
  sweep_temporaries(d);  // a writer of this step killed before its rename (a job resumed from an earlier step)
  return d;
}

std::optional<std::string> checkpoint_store::commit(std::int64_t step, const std::vector<std::string>& files,
                                                    const nlohmann::json& meta) const {
  const auto d = step_dir(step);
  std::set<std::string> seen;
  for (const auto& f : files) {
    if (!plain_name(f) || !seen.insert(f).second)
      return "cannot complete checkpoint " + d.string() + ": '" + f + "' is not a file name it can list";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(d / f, ec))
      return "cannot complete checkpoint " + d.string() + ": its file " + f + " is missing";
  }
  if (auto why = write_tensor_file(d / manifest_name, manifest_kind, {{"step", step}, {"files", files}, {"meta", meta}},
                                   {}))
    return why;
  // What no longer needs keeping: complete ones past the newest keep_, and incomplete
  // older ones (a crash's leftovers). Newer incomplete ones may be in the making.
  int kept = 0;
  for (auto s : steps_in(dir_)) {
    const bool done = std::filesystem::exists(step_dir(s) / manifest_name);
    if (s == step) {
      ++kept;
      continue;
    }
    if (s > step) {
      if (done) ++kept;
      continue;
    }
    if (done && kept < keep_) {
      ++kept;
      continue;
    }
    std::error_code ec;
    std::filesystem::remove_all(step_dir(s), ec);  // what stays is only disk space: no error to report
  }
  return std::nullopt;
}

std::vector<std::int64_t> checkpoint_store::complete() const {
  std::vector<std::int64_t> out;
  for (auto s : steps_in(dir_))
    if (std::filesystem::exists(step_dir(s) / manifest_name)) out.push_back(s);
  return out;
}

expected<checkpoint_store::found> checkpoint_store::latest_good(const file_check& check) const {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) return failure{"no checkpoint directory at " + dir_.string()};
  found out;
  for (auto s : complete()) {
    const auto d = step_dir(s);
    auto m = read_tensor_file(d / manifest_name, manifest_kind);
    std::string why;
    if (!m) {
      why = m.error().message;
    } else if (!m->meta.contains("files") || !m->meta["files"].is_array() || !m->meta.contains("step") ||
               m->meta["step"] != s) {
      why = (d / manifest_name).string() + ": its description is not a manifest of step " + std::to_string(s);
    } else {
      for (const auto& f : m->meta["files"]) {
        if (!f.is_string() || !plain_name(f.get<std::string>())) {
          why = (d / manifest_name).string() + ": it names a file that is not a plain file name";
          break;
        }
        if (auto bad = check(d / f.get<std::string>())) {
          why = *bad;
          break;
        }
      }
    }
    if (!why.empty()) {
      out.skipped.push_back("checkpoint " + std::to_string(s) + ": " + why);
      continue;
    }
    out.step = s;
    out.dir = d;
    out.meta = m->meta.value("meta", nlohmann::json::object());
    for (const auto& f : m->meta["files"]) out.files.push_back(f.get<std::string>());
    return out;
  }
  std::string all = "no complete checkpoint in " + dir_.string() + " passes its checks";
  for (const auto& s : out.skipped) all += "; " + s;
  return failure{all};
}

}  // namespace troupe
