// runtime: the in-process launcher.
#include "actors/runtime.hpp"

#include <random>
#include <thread>

#include "actors/pipeline_stage.hpp"
#include "actors/shard_server.hpp"

namespace troupe {

namespace {

std::string fresh_job_id() {
  std::random_device rd;
  const std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

expected<model> prepare_job(job_spec& job, const dataset_split& data) {
  job.train_size = data.train.size();
  const shape s = data.train.sample_shape();
  job.input_shape.assign(s.begin(), s.end());
  job.num_classes = data.train.num_classes;
  if (job.job_id.empty()) job.job_id = fresh_job_id();
  if (auto problem = validate(job)) return failure{*problem};
  auto m = build_model(job);
  if (!m) return m.error();
  if (job.pipeline_stages > 1 && job.cuts.empty()) {
    auto cuts = balanced_cuts(*m, static_cast<int>(job.pipeline_stages), job.balance);
    if (!cuts) return failure{"--pipeline-stages " + std::to_string(job.pipeline_stages) + ": " + cuts.error().message};
    job.cuts.assign(cuts->begin(), cuts->end());
  } else if (!job.cuts.empty()) {
    auto stages = m->cut(std::vector<int>(job.cuts.begin(), job.cuts.end()));
    if (!stages) return failure{"--cuts: " + stages.error().message};
  }
  return m;
}

void configure_in_process(caf::actor_system_config& cfg) {
  const unsigned cores = std::max(2u, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", static_cast<std::int64_t>(cores));
  // Note [Scheduler policy]: CAF's default work-stealing scheduler backs off to sleeping
  // 10 ms when idle, which a shard answering a pull pays on every message once the
  // workers' compute leaves it idle. The sharing policy wakes a thread through a
  // condition variable instead (measured: a lone pull + push round trip 307 us -> see
  // tools/bench/scale).
  cfg.set("scheduler.policy", caf::atom("sharing"));
  add_protocol_types(cfg);
}

job_handles spawn_job(caf::actor_system& sys, const job_spec& job, const model& m,
                      std::shared_ptr<const dataset_split> data, job_callbacks cb, observability obs,
                      compute_options compute) {
  job_handles h;
  h.coordinator = spawn_coordinator(sys, job, m, data, std::move(cb), obs);
  const std::chrono::milliseconds join_timeout(job.request_timeout_ms);
  for (std::uint32_t s = 0; s < job.servers; ++s) {
    h.shards.push_back(spawn_shard_server(sys, h.coordinator, job.job_id, join_timeout, obs));
    join_as_shard(h.shards.back(), {}, 0);
  }
  stage_options opts;
  opts.job_id = job.job_id;
  opts.join_timeout = join_timeout;
  opts.data = [data](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> { return data; };
  opts.obs = obs;
  opts.compute = compute;
  for (std::uint32_t w = 0; w < members(job); ++w) {
    h.workers.push_back(spawn_pipeline_stage(sys, h.coordinator, opts));
    join_as_member(h.workers.back(), {}, 0);
  }
  return h;
}

caf::expected<job_result> await_job(caf::actor_system& sys, const local_coordinator_actor& coordinator) {
  caf::scoped_actor self{sys};
  caf::expected<job_result> out{caf::error{}};
  self->request(coordinator, caf::infinite, run_request{})
      .receive([&](job_result& r) { out = std::move(r); }, [&](caf::error& e) { out = std::move(e); });
  return out;
}

caf::expected<job_result> run_job_in_process(job_spec job, std::shared_ptr<const dataset_split> data,
                                             job_callbacks cb, observability obs, compute_options compute) {
  auto m = prepare_job(job, *data);
  if (!m) return make_error(errc::bad_job, m.error().message);
  caf::actor_system_config cfg;
  configure_in_process(cfg);
  caf::actor_system sys{cfg};
  auto h = spawn_job(sys, job, *m, std::move(data), std::move(cb), std::move(obs), compute);
  return await_job(sys, h.coordinator);
}

}  // namespace troupe
