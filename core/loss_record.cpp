// loss_record: the record's JSON file and what it says of a resumed run (Note [Steps
// replayed] in loss_record.hpp).
#include "core/loss_record.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <system_error>

#include "base/durable_file.hpp"

namespace troupe {

namespace {

constexpr const char* record_kind = "troupe-lost-node";

}  // namespace

bool is_node_loss(errc code) {
  return code == errc::shard_lost || code == errc::all_workers_lost || code == errc::stage_lost ||
         code == errc::stalled;
}

std::optional<std::string> write_loss_record(const std::filesystem::path& dir, const loss_record& r) {
  nlohmann::ordered_json j;
  j["kind"] = record_kind;
  j["job_id"] = r.job_id;
  j["reached"] = r.reached;
  j["why"] = r.why;
  const std::string text = j.dump() + "\n";
  return write_file_durably(dir / loss_record_file, text.data(), text.size());
}

expected<std::optional<loss_record>> read_loss_record(const std::filesystem::path& dir) {
  const auto path = dir / loss_record_file;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<loss_record>();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return failure{path.string() + ": cannot be read"};
  try {
    const auto j = nlohmann::json::parse(text.str());
    if (j.at("kind").get<std::string>() != record_kind) return failure{path.string() + ": not a lost-node record"};
    loss_record r{j.at("job_id").get<std::string>(), j.at("reached").get<std::int64_t>(),
                  j.at("why").get<std::string>()};
    return std::optional<loss_record>(std::move(r));
  } catch (const nlohmann::json::exception&) {
    return failure{path.string() + ": not a lost-node record"};
  }
}

std::optional<std::string> forget_loss_record(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::remove(dir / loss_record_file, ec);
  if (ec) return (dir / loss_record_file).string() + ": cannot be removed (" + ec.message() + ")";
  return std::nullopt;
}

std::optional<std::int64_t> steps_replayed(const loss_record& r, const std::string& job_id, std::int64_t step) {
  if (r.job_id != job_id || r.reached < step) return std::nullopt;
  return r.reached - step;
}

taken_record take_loss_record(const std::filesystem::path& dir, const std::string& job_id, std::int64_t step) {
  taken_record out;
  if (auto record = read_loss_record(dir); !record)
    out.warnings.push_back(record.error().message + "; this run does not know how many steps it repeats");
  else if (*record)
    out.steps_replayed = steps_replayed(**record, job_id, step);
  if (auto why = forget_loss_record(dir)) out.warnings.push_back(*why);
  return out;
}

}  // namespace troupe
