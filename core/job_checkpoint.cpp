// job_checkpoint: the job-state file, the commit, and where a resumed job starts (Note
// [Resuming a job]).
#include "core/job_checkpoint.hpp"

#include <algorithm>

#include "core/kv_checkpoint.hpp"
#include "core/residual_checkpoint.hpp"
#include "tensor/tensor_file.hpp"

namespace troupe {

checkpoint_identity identity_of(const job_spec& job, std::int64_t num_params) {
  if (job.kv) return {job.job_id, key_value_model, 0, "the shards'"};  // Note [Key-value checkpoints]
  return {job.job_id, job.train.model, num_params, std::string(name_of(job.train.optimizer.kind))};
}

std::optional<std::string> commit_job_checkpoint(const checkpoint_store& store, const job_spec& job,
                                                 std::int64_t num_params, std::int64_t step,
                                                 const std::vector<checkpoint_saved>& shards,
                                                 const std::vector<kv_key_layout>& keys) {
  auto dir = store.begin(step);
  if (!dir) return dir.error().message;
  auto sorted = shards;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.shard < b.shard; });
  nlohmann::json files = nlohmann::json::array(), versions = nlohmann::json::array();
  std::vector<std::string> names{job_state_file};
  for (const auto& s : sorted) {
    files.push_back(s.file);
    versions.push_back(s.version);
    names.push_back(s.file);
  }
  // Every member's residuals written before the shards' files (Note [Residuals in checkpoints]).
  const std::vector<std::string> residuals =
      keeps_residuals(job) ? residual_files_in(*dir, members(job)) : std::vector<std::string>{};
  names.insert(names.end(), residuals.begin(), residuals.end());
  const std::int64_t spe = steps_per_epoch(job);
  nlohmann::json state = {{"step", step},
                                {"epoch", step / std::max<std::int64_t>(1, spe)},
                                {"workers", job.workers},
                                {"batch_size", job.train.batch_size},
                                {"train_size", job.train_size},
                                {"steps_per_epoch", spe},
                                {"epochs", job.train.epochs},
                                {"mode", std::string(name_of(job.mode))},
                                {"input_shape", job.input_shape},
                                {"classes", job.num_classes},
                                {"seed", job.train.seed},
                                {"shard_files", files},
                                {"shard_versions", versions},
                                {"member_files", residuals}};
  if (job.kv) state["keys"] = keys_to_json(keys);  // Note [Key-value checkpoints]
  if (auto why = write_checkpoint_file(*dir / job_state_file, job_state_kind, identity_of(job, num_params), state, {}))
    return why;
  return store.commit(step, names, {{"job_id", job.job_id}, {"model", job.train.model}, {"shard_versions", versions}});
}

expected<std::string> checkpointed_job_id(const std::filesystem::path& dir) {
  auto newest = checkpoint_store(dir, 1).latest_good([](const std::filesystem::path&) { return std::nullopt; });
  if (!newest) return newest.error();
  const std::string id = newest->meta.value("job_id", std::string());
  if (id.empty()) return failure{newest->dir.string() + ": its manifest names no job"};
  return id;
}

std::int64_t resume_clock(const job_spec& job, std::int64_t step, std::int64_t old_workers, std::int64_t old_batch,
                          std::int64_t old_steps_per_epoch) {
  const std::int64_t spe = steps_per_epoch(job);
  if (old_workers == job.workers && old_batch == job.train.batch_size && old_steps_per_epoch == spe) return step;
  const std::int64_t old_spe = std::max<std::int64_t>(1, old_steps_per_epoch);
  const std::int64_t epoch = step / old_spe;
  const std::int64_t trained = step % old_spe * old_batch * old_workers;  // of the epoch's permutation
  const std::int64_t round = job.train.batch_size * static_cast<std::int64_t>(job.workers);
  return epoch * spe + std::min(spe, trained / std::max<std::int64_t>(1, round));
}

namespace {

// A checkpoint file read back as what its name says it is, against the job's identity.
std::optional<std::string> check_file(const std::filesystem::path& file, const checkpoint_identity& id) {
  const std::string name = file.filename().string();
  if (name == job_state_file) {
    auto f = read_checkpoint_file(file, job_state_kind, id);
    if (!f) return f.error().message;
    return std::nullopt;
  }
  if (name.rfind("kv-shard-", 0) == 0) {  // Note [Key-value checkpoints]
    auto s = read_kv_shard_image(file, id);
    if (!s) return s.error().message;
    return std::nullopt;
  }
  // A shard's file, or a stage's (Note [Members' checkpoints] in core/member_checkpoint.cpp):
  // the same format.
  if (name.rfind("shard-", 0) == 0 || name.rfind("stage-", 0) == 0) {
    auto s = read_shard_image(file, id);
    if (!s) return s.error().message;
    return std::nullopt;
  }
  if (name.rfind("member-", 0) == 0) {  // Note [Residuals in checkpoints]
    auto r = read_residual_image(file, id);
    if (!r) return r.error().message;
    return std::nullopt;
  }
  return file.string() + ": not a file a checkpoint holds";
}

// The newest checkpoint in dir whose files all read back as `id`'s, with its job state.
struct good_checkpoint {
  checkpoint_store::found found;
  tensor_file state;
};
expected<good_checkpoint> newest_good(const std::filesystem::path& dir, const checkpoint_identity& id) {
  auto found = checkpoint_store(dir, 1).latest_good([&](const std::filesystem::path& f) { return check_file(f, id); });
  if (!found) return found.error();
  auto state = read_tensor_file(found->dir / job_state_file, job_state_kind);
  if (!state) return state.error();
  return good_checkpoint{std::move(*found), std::move(*state)};
}

}  // namespace

expected<checkpointed_model> read_checkpointed_model(const std::filesystem::path& dir) {
  // What the checkpoints say they are: the newest job state that reads back.
  const checkpoint_store store(dir, 1);
  std::optional<checkpoint_identity> id;
  for (auto step : store.complete()) {
    auto state = read_tensor_file(store.step_dir(step) / job_state_file, job_state_kind);
    if (!state) continue;
    const auto who = state->meta.value("identity", nlohmann::json::object());
    id = checkpoint_identity{who.value("job_id", std::string()), who.value("model", std::string()),
                             who.value("num_params", std::int64_t{0}), who.value("optimizer", std::string())};
    break;
  }
  if (!id) return failure{"no complete checkpoint with a readable job state in " + dir.string()};
  auto good = newest_good(dir, *id);
  if (!good) return good.error();
  const auto& [found, state] = *good;
  checkpointed_model out;
  out.step = found.step;
  out.job_id = id->job_id;
  out.model = id->model;
  out.skipped = found.skipped;
  std::vector<shard_image> shards;
  try {
    out.input_shape = state.meta.at("input_shape").get<std::vector<std::int64_t>>();
    out.classes = state.meta.at("classes").get<std::int64_t>();
    for (const auto& f : state.meta.at("shard_files")) {
      auto s = read_shard_image(found.dir / f.get<std::string>(), *id);
      if (!s) return s.error();
      shards.push_back(std::move(*s));
    }
  } catch (const nlohmann::json::exception&) {
    return failure{(found.dir / job_state_file).string() + ": its description is not a job's state"};
  }
  auto whole = reshard(shards, {key_range{0, 0, 0, id->num_params}}, id->num_params);
  if (!whole) return failure{found.dir.string() + ": " + whole.error().message};
  out.params = std::move(whole->params);
  return out;
}

namespace {

// Note [Key-value checkpoints]: a key-value job goes on from the step itself, on as many
// shard servers, with the keys every shard's file holds whole.
expected<resume_point> resume_keys(const job_spec& job, const checkpoint_store::found& found, const tensor_file& state,
                                   resume_point r) {
  const std::string where = (found.dir / job_state_file).string() + ": ";
  r.clock = r.step;
  if (r.shards.files.size() != job.servers)
    return failure{where + "it was taken on " + std::to_string(r.shards.files.size()) +
                   " shard servers; a key-value job resumes on as many: start it with --servers " +
                   std::to_string(r.shards.files.size())};
  auto keys = keys_from_json(state.meta.value("keys", nlohmann::json::array()));
  if (!keys) return failure{where + keys.error().message};
  std::vector<std::vector<kv_part_id>> parts;
  for (const auto& f : r.shards.files) {
    auto image = read_kv_shard_image(found.dir / f, identity_of(job, 0));
    if (!image) return image.error();
    auto& held = parts.emplace_back();
    for (const auto& p : image->parts) held.push_back(p.id);
  }
  r.keys = keys_held_whole(*keys, parts);
  if (auto restored = kv_registry::restore(job.servers, job.big_array_bound, r.keys); !restored)
    return failure{where + restored.error().message};
  r.shards.dir = found.dir.string();
  r.shards.clock = r.clock;
  return r;
}

}  // namespace

expected<resume_point> find_resume(const std::filesystem::path& dir, const job_spec& job, std::int64_t num_params,
                                   resume_at_end at_end) {
  auto good = newest_good(dir, identity_of(job, num_params));
  if (!good) return good.error();
  const auto& [found, state] = *good;
  resume_point r;
  r.step = found.step;
  r.skipped = found.skipped;
  const auto& m = state.meta;
  const std::string where = (found.dir / job_state_file).string() + ": ";
  if (job.kv) {
    try {
      for (const auto& f : m.at("shard_files")) r.shards.files.push_back(f.get<std::string>());
    } catch (const nlohmann::json::exception&) {
      return failure{where + "its description is not a job's state"};
    }
    return resume_keys(job, found, state, std::move(r));
  }
  try {
    r.clock = resume_clock(job, r.step, m.at("workers").get<std::int64_t>(), m.at("batch_size").get<std::int64_t>(),
                           m.at("steps_per_epoch").get<std::int64_t>());
    for (const auto& f : m.at("shard_files")) r.shards.files.push_back(f.get<std::string>());
  } catch (const nlohmann::json::exception&) {
    return failure{where + "its description is not a job's state"};
  }
  if (r.shards.files.empty()) return failure{where + "it names no shard files"};
  for (const auto& f : r.shards.files)
    if (std::find(found.files.begin(), found.files.end(), f) == found.files.end())
      return failure{where + "it names " + f + ", which the checkpoint's manifest does not"};
  if (r.clock >= steps_per_epoch(job) * job.train.epochs && at_end == resume_at_end::refused)
    return failure{"checkpoint " + std::to_string(r.step) + " in " + dir.string() + " is the end of the job's " +
                   std::to_string(job.train.epochs) + " epochs: nothing is left to train; raise --epochs to train on"};
  r.shards.dir = found.dir.string();
  r.shards.clock = r.clock;
  return r;
}

}  // namespace troupe
