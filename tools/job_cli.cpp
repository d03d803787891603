// job_cli: the job's flags, their forwarding as TOML, and the job in one line (its output
// in job_output.cpp).
#include "tools/job_cli.hpp"

#include <charconv>
#include <sstream>

#include "core/sample_deal.hpp"
#include "tools/checkpoint_cli.hpp"
#include "tools/config_file.hpp"

namespace troupe::cli {

namespace {

// Parses "2,4" into layer indices; returns an error message or empty.
std::string parse_cuts(const std::string& text, std::vector<std::int32_t>& cuts) {
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string tok = text.substr(pos, comma - pos);
    std::int32_t v = 0;
    auto [p, e] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (tok.empty() || e != std::errc() || p != tok.data() + tok.size() || v < 1)
      return "--cuts: expected layer indices separated by commas, each at least 1 (e.g. 2,4), got '" + text + "'";
    if (!cuts.empty() && v <= cuts.back()) return "--cuts: the cut points must increase, got '" + text + "'";
    cuts.push_back(v);
    pos = comma + 1;
  }
  return {};
}

// Parses RANK:FACTOR; returns an error message or empty.
std::string parse_slow_worker(const std::string& text, std::int32_t& rank, double& factor) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return "--slow-worker: expected RANK:FACTOR (e.g. 3:4), got '" + text + "'";
  const std::string r = text.substr(0, colon), f = text.substr(colon + 1);
  auto [p1, e1] = std::from_chars(r.data(), r.data() + r.size(), rank);
  auto [p2, e2] = std::from_chars(f.data(), f.data() + f.size(), factor);
  if (e1 != std::errc() || p1 != r.data() + r.size() || rank < 0 || e2 != std::errc() || p2 != f.data() + f.size() ||
      !(factor >= 1.0))
    return "--slow-worker: expected RANK:FACTOR with RANK >= 0 and FACTOR >= 1 (e.g. 3:4), got '" + text + "'";
  return {};
}

// --workers to --balance: the members, servers and pipeline.
void add_layout_options(CLI::App& app, job_cli_options& o) {
  app.add_option("--workers,--replicas", o.job.workers,
                 "Data-parallel replicas: workers, or pipelines of --pipeline-stages stages each")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str()
      ->group(group_job);
  o.servers_option = app.add_option("--servers", o.job.servers,
                                    "Parameter shard servers (0: a single pipeline applies the optimizer in its "
                                    "stages; --mode allreduce has none)")
                         ->check(CLI::Range(0, 1024))
                         ->capture_default_str()
                         ->group(group_job);
  app.add_option("--pipeline-stages", o.job.pipeline_stages, "Cut the model into K stages, one actor each")
      ->check(CLI::Range(1, 64))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--microbatches", o.job.microbatches, "Split each minibatch into M microbatches for the pipeline")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--schedule", o.schedule,
                 "Pipeline schedule: gpipe (all forwards, then all backwards) or 1f1b (one forward, one backward)")
      ->check(CLI::IsMember({"gpipe", "1f1b"}))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--cuts", o.cuts, "Explicit stage cut points as layer indices, e.g. 2,4 (default: balanced)")
      ->group(group_job);
  app.add_option("--balance", o.balance,
                 "Without --cuts, cut the pipeline where its stages are most even: by time (each layer's forward "
                 "and backward measured on this host), by forward flops, or by params")
      ->check(CLI::IsMember({"time", "flops", "params"}))
      ->capture_default_str()
      ->group(group_job);
}

// --mode to --bucket-bytes: how the replicas combine their gradients and what crosses the network.
void add_exchange_options(CLI::App& app, job_cli_options& o) {
  app.add_option("--mode", o.mode, "Consistency: sync (one summed update per round), async (apply on arrival), "
                                   "ssp (async with a staleness bound), allreduce (no shard servers: the replicas "
                                   "sum their gradients in a ring, Horovod's way; with a command, the users' loops' "
                                   "collectives go round it)")
      ->check(CLI::IsMember({"sync", "async", "ssp", "allreduce"}))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--allreduce-op", o.allreduce_op,
                 "allreduce: sum the replicas' gradients (the default: what a sync round applies; the lr means the "
                 "same) or avg (Horovod's default: the lr is per replica's batch)")
      ->check(CLI::IsMember({"sum", "avg"}))
      ->group(group_job);
  app.add_flag("--kv", o.job.kv,
               "A key-value job: the workers are programs that use Troupe's client library (troupe.kv, "
               "troupe::kv::kvstore); `launch ... -- COMMAND` sets it")
      ->group(group_job);
  app.add_flag("--local-reduce", o.job.local_reduce,
               "sync or allreduce: workers of one node sum their gradients among themselves (NCCL between GPUs, "
               "threads in one process); one leader per node pushes the sum and pulls, or rings it with the other "
               "nodes' leaders")
      ->group(group_job);
  app.add_option("--compression", o.compression,
                 "How gradients travel to the shards: none, fp16, bf16, or 2bit[:THRESHOLD] (2 bits per element "
                 "with error feedback, MXNet's scheme; threshold 0.5)")
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--pull-precision", o.pull_precision,
                 "How parameters travel back from the shards: fp32, fp16, bf16, or 2bit (the change since a "
                 "member's last pull, in 2-bit codes)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "2bit"}))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--bucket-bytes", o.job.bucket_bytes,
                 "Push each layer's gradient in buckets of at least this many bytes as soon as backward has "
                 "produced it, to shards reached over the network (DDP's buckets); 0: one push after backward")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str()
      ->group(group_job);
}

// --staleness to --share-balance: the rules for staleness, stragglers and lost workers.
void add_rule_options(CLI::App& app, job_cli_options& o) {
  app.add_option("--staleness", o.job.staleness, "ssp: how many clocks a worker may run ahead of the slowest")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str()
      ->group(group_job);
  app.add_flag("--staleness-lr", o.job.staleness_lr, "async/ssp: scale the learning rate by 1 / max(1, staleness)")
      ->group(group_job);
  app.add_option("--async-rule", o.async_rule,
                 "async/ssp: how shards correct for staleness: dana (each worker's own SGD momentum on the shards, "
                 "the parameters kept where the others' next pushes will take them, each push a 1/N share), "
                 "momentum (one shared momentum lowered for the momentum that N asynchronous workers add, and the "
                 "lr where that is not enough), dcasgd (that, and DC-ASGD's delay compensation of each gradient), "
                 "or none")
      ->check(CLI::IsMember({"dana", "momentum", "dcasgd", "none"}))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--dc-lambda", o.job.dc_lambda, "--async-rule dcasgd: the compensation's weight lambda (MXNet's 0.04)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--critical-batch", o.job.critical_batch,
                 "sync: the workers' total batch (samples) beyond which the summed update's lr stops growing with "
                 "more workers, its warm-up lengthened to match; 0: linear scaling without a cap")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--backup-workers", o.job.backup_workers,
                 "sync: close each round with the first (workers - B) gradients and drop the late ones, so the B "
                 "slowest workers cost nothing (the late ones skip to the open round); 0: wait for every worker")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--min-workers", o.job.min_workers,
                 "Elastic, as Horovod's --min-np: the fewest workers the job goes on with. A key-value job (launch "
                 "... -- COMMAND) goes on without a lost worker while N remain, and ends with fewer (then launch "
                 "--max-restarts starts it again from its newest checkpoint); --mode allreduce with --checkpoint-dir "
                 "and --max-restarts re-forms the ring from the survivors, rolled back to the newest checkpoint, while "
                 "at least N remain; 0: not elastic")
      ->check(CLI::Range(0u, 1048576u))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--straggler-factor", o.job.straggler_factor,
                 "ssp: a worker whose steps compute this many times the median is left out of the staleness "
                 "bound while it is slow (its gradients apply at lr / staleness); 0: never")
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--share-balance", o.share_balance,
                 "a worker whose compute is slower than the others' trains fewer of its own samples a step and the "
                 "others the rest, so all finish their epochs together: auto (on in async and ssp; off in sync, "
                 "which stays bitwise reproducible), on, or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str()
      ->group(group_job);
}

// --big-array-bound to --stall-timeout: sharding, benchmarks' slowdowns and timeouts.
void add_run_options(CLI::App& app, job_cli_options& o) {
  app.add_option("--big-array-bound", o.job.big_array_bound,
                 "Split parameter blocks above this many floats across shards (0 = automatic)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--simulate-compute", o.job.simulate_compute_ms,
                 "Replace forward/backward by a delay of this many ms and a synthetic gradient (benchmarks)")
      ->check(CLI::Range(0.0, 3600e3))
      ->group(group_job);
  app.add_option("--slow-worker", o.slow_worker, "RANK:FACTOR makes one worker FACTOR times slower (benchmarks)")
      ->group(group_job);
  app.add_option("--request-timeout", o.request_timeout_s, "Seconds any request to another actor may take")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str()
      ->group(group_job);
  app.add_option("--stall-timeout", o.stall_timeout_s, "Fail the job after this many seconds without progress")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str()
      ->group(group_job);
}

}  // namespace

void add_job_options(CLI::App& app, job_cli_options& o) {
  o.train.train.epochs = o.job.train.epochs;
  add_train_options(app, o.train);
  for (auto* opt : app.get_options())
    if (opt->get_group() == "Options" && opt->get_single_name() != "help") opt->group(group_model);
  CLI::App& data_holder = app;
  add_data_options(data_holder, o.data);
  for (const char* name : {"--dataset", "--data", "--train-samples", "--context", "--sample", "--augment"})
    app.get_option(name)->group(group_data);
  add_layout_options(app, o);
  add_exchange_options(app, o);
  add_rule_options(app, o);
  add_run_options(app, o);
  add_checkpoint_options(app, o.job.checkpoints, o.resume, group_job);
}

expected<job_spec> resolve_job_options(const job_cli_options& o) {
  job_spec job = o.job;
  job.train = resolve_train_options(o.train);
  job.mode = *parse_sync_mode(o.mode);
  if (!o.allreduce_op.empty() && job.mode != sync_mode::allreduce)
    return failure{"--allreduce-op says how --mode allreduce combines the replicas' gradients; this job's mode is " +
                   std::string(name_of(job.mode))};
  job.ring_op = o.allreduce_op.empty() ? reduce_op::sum : *parse_reduce_op(o.allreduce_op);
  if (job.mode == sync_mode::allreduce && !(o.servers_option && o.servers_option->count() > 0)) job.servers = 0;
  if (o.train.batch_size == "auto") {
    const batch_choice b = auto_batch(job);
    job.train.batch_size = b.batch;
    job.train.lr *= b.lr_factor;
    job.batch_auto = true;
  }
  job.async_correction = *parse_async_rule(o.async_rule);
  job.balance_shares = o.share_balance == "on"    ? share_balance::on
                       : o.share_balance == "off" ? share_balance::off
                                                  : share_balance::automatic;
  auto schedule = parse_pipeline_schedule(o.schedule);
  if (!schedule) return schedule.error();
  job.schedule = *schedule;
  auto balance = parse_stage_balance(o.balance);
  if (!balance) return balance.error();
  job.balance = *balance;
  if (!o.cuts.empty())
    if (auto err = parse_cuts(o.cuts, job.cuts); !err.empty()) return failure{err};
  job.dataset = o.data.dataset;
  job.data_dir = o.data.dir;
  job.train_samples = o.data.train_samples;
  job.context = o.data.context;
  job.train.augment = augment_text(o.data);
  job.request_timeout_ms = static_cast<std::int64_t>(o.request_timeout_s * 1000);
  job.stall_timeout_ms = static_cast<std::int64_t>(o.stall_timeout_s * 1000);
  if (!o.slow_worker.empty())
    if (auto err = parse_slow_worker(o.slow_worker, job.slow_worker, job.slow_factor); !err.empty()) return failure{err};
  auto codec = parse_grad_codec(o.compression);
  if (!codec) return codec.error();
  job.compression = *codec;
  if (o.pull_precision != "fp32") job.pull_precision = *parse_grad_codec(o.pull_precision);
  if (auto problem = validate(job)) return failure{*problem};
  return job;
}

std::string job_options_as_toml(CLI::App& app) {
  std::string out;
  for (const CLI::Option* opt : app.get_options()) {
    const std::string& g = opt->get_group();
    if ((g != group_model && g != group_data && g != group_job) || opt->count() == 0) continue;
    out += toml_line(*opt);
  }
  return out;
}

std::string describe_update_rules(const job_spec& job) {
  if (job.mode == sync_mode::allreduce && job.kv) return "; the workers' collectives go round a ring of their own";
  if (job.mode == sync_mode::allreduce && job.workers > 1)
    return job.ring_op == reduce_op::sum
               ? "; the replicas sum their gradients in a ring each step and apply the sum, as a sync round does"
               : "; the replicas average their gradients in a ring each step (the lr is per replica's batch)";
  if (job.kv || job.servers == 0) return "";
  std::ostringstream s;
  constexpr const char* balanced =
      "; a worker that computes slower than the others trains fewer of its samples and they the rest "
      "(--share-balance)";
  if (job.mode == sync_mode::sync) {
    const lr_schedule capped = job_schedule(job);
    if (capped.base != job.train.lr)
      s << "; past --critical-batch " << job.critical_batch << " the shards use lr " << capped.base
        << " per worker batch, warmed up over " << capped.warmup_steps << " rounds";
    if (job.backup_workers > 0)
      s << "; a round closes with the first " << job.workers - static_cast<std::uint32_t>(job.backup_workers) << " of "
        << job.workers << " gradients (--backup-workers " << job.backup_workers << ")";
  }
  if (job.mode == sync_mode::sync) {
    if (balances_shares(job)) s << balanced;
    return s.str();
  }
  if (job.async_correction != async_rule::none && job.train.optimizer.kind == optimizer_kind::sgd && job.workers >= 2) {
    s << "; --async-rule " << name_of(job.async_correction);
    if (job.async_correction == async_rule::dana && job.train.optimizer.momentum > 0.f) {
      s << ": the shards keep each worker's own momentum " << job.train.optimizer.momentum
        << " and the parameters a step ahead, each push stepping 1/" << job.workers << " of the lr";
    } else {
      const momentum_correction c = correct_for_asynchrony(job.train.optimizer.momentum, job.workers);
      if (job.async_correction == async_rule::dcasgd) s << " (lambda " << job.dc_lambda << ")";
      s << ": the shards use momentum " << c.momentum;
      if (c.lr_scale != 1.f) s << " and " << c.lr_scale << " x the lr";
      s << " for " << job.workers << " asynchronous workers";
    }
    if (job.workers > async_warmup_workers)
      s << ", warmed up over " << job_schedule(job).warmup_steps << " steps";
  }
  if (job.mode == sync_mode::ssp && job.straggler_factor > 0.0 && job.workers >= 2)
    s << "; a worker whose steps compute over " << job.straggler_factor
      << "x the median leaves the bound while it is slow (--straggler-factor)";
  if (balances_shares(job)) s << balanced;
  return s.str();
}

std::string describe(const job_spec& job, const dataset_split& data) {
  std::ostringstream s;
  s << name_of(job.mode);
  if (job.mode == sync_mode::ssp) s << " (staleness bound " << job.staleness << ")";
  if (job.pipeline_stages > 1) {
    s << ", " << job.workers << (job.workers == 1 ? " pipeline" : " pipelines") << " of " << job.pipeline_stages
      << " stages (" << name_of(job.schedule) << ", " << job.microbatches << " microbatches, cuts at layers";
    for (std::size_t i = 0; i < job.cuts.size(); ++i) s << (i ? "," : " ") << job.cuts[i];
    s << ")";
  } else {
    s << ", " << job.workers << " workers";
  }
  if (job.mode != sync_mode::allreduce) s << ", " << job.servers << " shard servers";
  s << ", model " << job.train.model << ", "
    << job.train_size << " training samples (" << data.train.name << "), " << job.train.epochs << " epochs, batch "
    << job.train.batch_size << " per worker";
  if (job.batch_auto && job.workers > 1 && job.train.batch_size != reference_batch)
    s << " (--batch-size auto: " << job.train.batch_size * job.workers << " samples "
      << (in_lockstep(job.mode) ? "a round" : "across the workers")
      << (in_lockstep(job.mode) ? ", lr scaled by the batch over 128" : "")
      << "; a larger --batch-size N trains faster and may learn less)";
  s << ", " << describe(job.train);
  s << describe_update_rules(job);
  if (job.simulate_compute_ms > 0) s << ", simulated compute " << job.simulate_compute_ms << " ms";
  if (job.slow_worker >= 0) s << ", worker " << job.slow_worker << " slowed " << job.slow_factor << "x";
  return s.str();
}

}  // namespace troupe::cli
