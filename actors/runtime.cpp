// runtime: the in-process launcher.
#include "actors/runtime.hpp"

#include <thread>

#include "actors/pipeline_stage.hpp"
#include "actors/shard_server.hpp"

namespace troupe {

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

job_handles spawn_job(caf::actor_system& sys, job_spec job, const model& m, std::shared_ptr<const dataset_split> data,
                      job_callbacks cb, observability obs, compute_options compute,
                      std::optional<resume_point> resume) {
  // Nothing in one process joins again, so a lost shard ends the job (Note [Restarting
  // in place] in actors/coordinator_restart.cpp needs nodes of their own).
  job.checkpoints.on_shard_loss = shard_loss::fail;
  job_handles h;
  h.coordinator = spawn_coordinator(sys, job, m, data, std::move(cb), obs, {}, std::move(resume));
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
                                             job_callbacks cb, observability obs, compute_options compute,
                                             std::optional<resume_point> resume) {
  auto m = prepare_job(job, *data);
  if (!m) return make_error(errc::bad_job, m.error().message);
  caf::actor_system_config cfg;
  configure_in_process(cfg);
  caf::actor_system sys{cfg};
  auto h = spawn_job(sys, job, *m, std::move(data), std::move(cb), std::move(obs), compute, std::move(resume));
  return await_job(sys, h.coordinator);
}

}  // namespace troupe
