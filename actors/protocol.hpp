// Troupe's actor protocol: atoms, message structs with their inspect overloads, the typed
// interfaces of the shard server, coordinator and evaluator, the CAF error category for
// errc, and add_protocol_types(), which every node calls before building its actor system
// (an unregistered type silently becomes an empty message on the wire).
//
// Note [Tensors on the wire]
// A tensor is serialized as dtype, byte order, rank, extents, byte count and one raw blob
// (apply_raw), never element by element. The deserializer checks every field and the
// size limit before it allocates; a mismatch (another byte order, an unknown dtype, a
// size that disagrees with the shape) is a decode error, never a corrupted tensor.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "base/errc.hpp"
#include "core/messages.hpp"

namespace troupe {

// ---------------------------------------------------------------------------------------
// Atoms (CAF 0.17: at most 10 characters)

using push_atom = caf::atom_constant<caf::atom("push")>;
using pull_atom = caf::atom_constant<caf::atom("pull")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using left_atom = caf::atom_constant<caf::atom("left")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using epoch_atom = caf::atom_constant<caf::atom("epoch")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using eval_atom = caf::atom_constant<caf::atom("eval")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using activation_atom = caf::atom_constant<caf::atom("activation")>;
using act_grad_atom = caf::atom_constant<caf::atom("actgrad")>;
using group_atom = caf::atom_constant<caf::atom("group")>;

// ---------------------------------------------------------------------------------------
// Errors

inline caf::error make_error(errc x) { return caf::error(static_cast<std::uint8_t>(x), caf::atom("troupe")); }
inline caf::error make_error(errc x, std::string detail) {
  return caf::error(static_cast<std::uint8_t>(x), caf::atom("troupe"), caf::make_message(std::move(detail)));
}
// The errc of a Troupe error; nullopt for CAF's own errors.
std::optional<errc> troupe_code(const caf::error& e);
// "not_finite: gradient holds NaN..." for Troupe errors, CAF's rendering for the others.
std::string describe(const caf::error& e);

// ---------------------------------------------------------------------------------------
// Typed interfaces

using shard_actor = caf::typed_actor<
    caf::replies_to<start_atom, membership>::with<caf::ok_atom>,
    caf::replies_to<push_atom, push_grads>::with<push_ack>,
    caf::replies_to<pull_atom, pull_request>::with<params_reply>,
    caf::replies_to<snapshot_atom>::with<params_reply>,
    caf::replies_to<stats_atom>::with<shard_stats>,
    caf::reacts_to<left_atom, std::uint32_t>,
    caf::replies_to<join_atom, member_joined>::with<caf::ok_atom>,
    // Local trigger: join the coordinator, telling it where workers reach this shard.
    caf::reacts_to<join_atom, std::string, std::uint16_t>>;

// Coordinator -> worker: its rank, the job, the key-range table and the shards.
struct worker_welcome {
  std::uint32_t rank = 0;
  std::uint32_t world = 0;
  job_spec job;
  key_table table;
  std::vector<shard_actor> shards;        // indexed by shard
  std::vector<std::string> shard_hosts;   // where to reach them directly; empty in one process
  std::vector<std::uint16_t> shard_ports;
  std::int64_t resume_clock = 0;          // > 0 when this worker replaces one that died
  // Pipeline neighbours (stage - 1 and stage + 1 of the same replica; invalid at the
  // ends): handles in one process, addresses across nodes.
  caf::actor prev, next;
  std::string prev_host, next_host;
  std::uint16_t prev_port = 0, next_port = 0;
  // --local-reduce: the members of this worker's local group, ascending (the first leads);
  // empty when it pushes and pulls on its own.
  std::vector<std::uint32_t> group;
};

using coordinator_actor = caf::typed_actor<
    caf::replies_to<join_atom, shard_join>::with<shard_welcome>,
    caf::replies_to<join_atom, worker_join>::with<worker_welcome>,
    caf::reacts_to<progress_atom, step_report>,
    caf::reacts_to<epoch_atom, worker_epoch>,
    caf::reacts_to<done_atom, worker_done>,
    caf::reacts_to<group_atom, group_id>,
    caf::replies_to<run_atom>::with<job_result>,
    caf::reacts_to<caf::tick_atom>>;

using evaluator_actor = caf::typed_actor<caf::replies_to<eval_atom, eval_request>::with<eval_reply>>;

// ---------------------------------------------------------------------------------------
// inspect overloads

caf::error inspect(caf::serializer& f, tensor& x);
caf::error inspect(caf::deserializer& f, tensor& x);

template <class Inspector>
std::enable_if_t<!std::is_base_of_v<caf::serializer, Inspector> && !std::is_base_of_v<caf::deserializer, Inspector>,
                 typename Inspector::result_type>
inspect(Inspector& f, tensor& x) {
  std::string summary = x.empty() ? "empty" : std::string(name_of(x.type())) + x.sizes().str();
  return f(caf::meta::type_name("tensor"), summary);
}

// The largest tensor a node accepts from the wire.
inline constexpr std::uint64_t max_wire_tensor_bytes = std::uint64_t{1} << 32;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_config& x) {
  return f(caf::meta::type_name("optimizer_config"), x.kind, x.momentum, x.nesterov, x.weight_decay, x.beta1, x.beta2,
           x.eps);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, local_train_config& x) {
  return f(caf::meta::type_name("train_config"), x.model, x.epochs, x.batch_size, x.lr, x.optimizer, x.schedule,
           x.warmup_epochs, x.seed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_spec& x) {
  return f(caf::meta::type_name("job_spec"), x.job_id, x.train, x.dataset, x.data_dir, x.train_samples, x.train_size,
           x.input_shape, x.num_classes, x.workers, x.servers, x.pipeline_stages, x.microbatches,
           x.schedule, x.balance, x.cuts, x.mode, x.staleness, x.staleness_lr,
           x.big_array_bound, x.simulate_compute_ms, x.slow_worker, x.slow_factor, x.request_timeout_ms,
           x.stall_timeout_ms, x.local_reduce);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, key_range& x) {
  return f(caf::meta::type_name("key_range"), x.shard, x.block, x.offset, x.length);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, key_table& x) {
  return f(caf::meta::type_name("key_table"), x.ranges, x.shard_numel);
}

#define TROUPE_INSPECT(type, ...)                                              \
  template <class Inspector>                                                   \
  typename Inspector::result_type inspect(Inspector& f, type& x) {             \
    return f(caf::meta::type_name(#type), __VA_ARGS__);                        \
  }

TROUPE_INSPECT(push_grads, x.shard, x.worker, x.clock, x.base_version, x.grad)
TROUPE_INSPECT(push_ack, x.version, x.staleness)
TROUPE_INSPECT(pull_request, x.shard, x.worker, x.clock)
TROUPE_INSPECT(params_reply, x.shard, x.version, x.params)
TROUPE_INSPECT(membership, x.workers, x.stages)
TROUPE_INSPECT(shard_stats, x.shard, x.version, x.updates, x.gradients, x.rejected, x.pulls, x.pulls_held, x.held_now,
               x.staleness_sum, x.staleness_count, x.staleness_max, x.staleness_hist)
TROUPE_INSPECT(shard_join, x.job_id, x.host, x.port)
TROUPE_INSPECT(member_joined, x.rank, x.clock)
TROUPE_INSPECT(shard_welcome, x.index, x.job, x.ranges)
TROUPE_INSPECT(worker_join, x.job_id, x.host, x.port, x.locality)
TROUPE_INSPECT(group_id, x.leader, x.id)
TROUPE_INSPECT(activation, x.replica, x.stage, x.step, x.microbatch, x.data)
TROUPE_INSPECT(activation_grad, x.replica, x.stage, x.step, x.microbatch, x.data)
TROUPE_INSPECT(worker_welcome, x.rank, x.world, x.job, x.table, x.shards, x.shard_hosts, x.shard_ports,
               x.resume_clock, x.prev, x.next, x.prev_host, x.next_host, x.prev_port, x.next_port, x.group)
TROUPE_INSPECT(step_report, x.rank, x.clock, x.epoch, x.loss, x.samples, x.busy_seconds, x.window_begin_us,
               x.window_end_us)
TROUPE_INSPECT(worker_epoch, x.rank, x.epoch, x.loss_sum, x.steps, x.samples, x.seconds, x.params)
TROUPE_INSPECT(worker_done, x.rank, x.clock, x.rejected, x.peak_stored)
TROUPE_INSPECT(eval_request, x.epoch, x.params)
TROUPE_INSPECT(eval_reply, x.epoch, x.accuracy, x.loss)
TROUPE_INSPECT(job_result, x.mode, x.workers, x.servers, x.epochs, x.evaluated, x.test_accuracy, x.test_loss,
               x.train_seconds, x.samples_per_second, x.steady_samples_per_second, x.samples, x.mean_staleness, x.max_staleness, x.workers_lost,
               x.rejected, x.pipeline_stages, x.microbatches, x.bubble, x.peak_stored, x.params)

#undef TROUPE_INSPECT

// Registers every message type above (under the same names on every node) and the
// "troupe" error category.
void add_protocol_types(caf::actor_system_config& cfg);

}  // namespace troupe
