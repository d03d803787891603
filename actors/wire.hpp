// How Troupe's messages cross the wire: the inspect overloads CAF serializes them with,
// for every message of core/messages.hpp and core/kv_messages.hpp, the ring's pieces
// (core/ring_collective.hpp), and the types inside them. actors/protocol.hpp
// includes this and registers the messages; nothing else needs it directly.
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

#include "core/kv_messages.hpp"
#include "core/messages.hpp"
#include "core/ring_collective.hpp"

namespace troupe {

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
typename Inspector::result_type inspect(Inspector& f, lr_schedule& x) {
  return f(caf::meta::type_name("lr_schedule"), x.kind, x.base, x.warmup_steps, x.total_steps, x.final_fraction);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, local_train_config& x) {
  return f(caf::meta::type_name("train_config"), x.model, x.epochs, x.batch_size, x.lr, x.optimizer, x.schedule,
           x.warmup_epochs, x.seed, x.augment, x.init);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grad_codec& x) {
  return f(caf::meta::type_name("grad_codec"), x.kind, x.threshold, x.adaptive);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_plan& x) {
  return f(caf::meta::type_name("checkpoint_plan"), x.dir, x.every, x.seconds, x.keep, x.fatal,
           x.queue, x.on_shard_loss);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_spec& x) {
  return f(caf::meta::type_name("job_spec"), x.job_id, x.train, x.dataset, x.data_dir, x.train_samples, x.train_size,
           x.input_shape, x.num_classes, x.workers, x.servers, x.pipeline_stages, x.microbatches,
           x.schedule, x.balance, x.cuts, x.mode, x.staleness, x.staleness_lr,
           x.async_correction, x.dc_lambda, x.critical_batch, x.backup_workers, x.min_workers, x.straggler_factor, x.balance_shares,
           x.big_array_bound, x.simulate_compute_ms, x.slow_worker, x.slow_factor, x.request_timeout_ms,
           x.stall_timeout_ms, x.local_reduce, x.compression, x.pull_precision, x.bucket_bytes, x.kv, x.checkpoints,
           x.batch_auto, x.ring_op, x.ring_piece_elems, x.context);
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

TROUPE_INSPECT(shared_tensor, x.segment, x.offset, x.capacity, x.ticket, x.dtype, x.dims)
TROUPE_INSPECT(lane_tensor, x.ticket, x.dtype, x.dims)
TROUPE_INSPECT(lane_offer, x.port, x.token)
TROUPE_INSPECT(params_reply, x.shard, x.version, x.params)
TROUPE_INSPECT(membership, x.workers, x.stages, x.clock)
TROUPE_INSPECT(shard_stats, x.shard, x.version, x.updates, x.gradients, x.rejected, x.pulls, x.pulls_held, x.held_now,
               x.staleness_sum, x.staleness_count, x.staleness_max, x.staleness_hist)
TROUPE_INSPECT(shard_join, x.job_id, x.host, x.port, x.proof)
TROUPE_INSPECT(member_joined, x.rank, x.clock)
TROUPE_INSPECT(shard_resume, x.dir, x.files, x.clock)
TROUPE_INSPECT(shard_welcome, x.index, x.job, x.ranges, x.resume)
TROUPE_INSPECT(checkpoint_saved, x.shard, x.step, x.version, x.file, x.error)
TROUPE_INSPECT(checkpoint_begun, x.shard, x.step)
TROUPE_INSPECT(worker_join, x.job_id, x.host, x.port, x.locality, x.proof, x.wanted_rank)
TROUPE_INSPECT(group_id, x.leader, x.id)
TROUPE_INSPECT(activation, x.replica, x.stage, x.step, x.microbatch, x.data)
TROUPE_INSPECT(activation_grad, x.replica, x.stage, x.step, x.microbatch, x.data)
TROUPE_INSPECT(member_assignment, x.rank, x.world, x.job, x.table, x.shard_hosts, x.shard_ports, x.resume_clock,
               x.prev_host, x.next_host, x.prev_port, x.next_port, x.group, x.ring_prev_host, x.ring_next_host,
               x.ring_prev_port, x.ring_next_port, x.ring, x.resume)
TROUPE_INSPECT(stage_hello, x.replica, x.stage)
TROUPE_INSPECT(ring_mailbox_offer, x.answer, x.segment, x.accepted, x.why)
TROUPE_INSPECT(ring_piece, x.collective, x.phase, x.chunk, x.offset, x.values, x.shared, x.lane)
TROUPE_INSPECT(step_report, x.rank, x.clock, x.epoch, x.loss, x.samples, x.busy_seconds, x.window_begin_us,
               x.window_end_us, x.samples_dropped)
TROUPE_INSPECT(worker_epoch, x.rank, x.epoch, x.loss_sum, x.steps, x.samples, x.seconds, x.params, x.params_fnv1a)
TROUPE_INSPECT(worker_done, x.rank, x.clock, x.rejected, x.peak_stored, x.bytes_pushed, x.samples_dropped)
TROUPE_INSPECT(rows_grant, x.id, x.epoch, x.from_step, x.positions)
TROUPE_INSPECT(rows_shed, x.id, x.keep, x.not_before)
TROUPE_INSPECT(rows_answer, x.rank, x.id, x.taken, x.from_clock)
TROUPE_INSPECT(eval_request, x.epoch, x.params)
TROUPE_INSPECT(eval_reply, x.epoch, x.accuracy, x.loss)
TROUPE_INSPECT(job_result, x.mode, x.workers, x.servers, x.epochs, x.evaluated, x.test_accuracy, x.test_loss,
               x.accuracy_at_chance_epoch, x.train_seconds, x.samples_per_second, x.steady_samples_per_second,
               x.samples, x.samples_planned, x.samples_dropped, x.samples_redealt, x.mean_staleness, x.max_staleness, x.workers_lost, x.rejected,
               x.pipeline_stages, x.microbatches, x.bubble, x.peak_stored, x.push_bytes_per_step, x.resumed_from_step,
               x.steps_replayed, x.checkpoints_written, x.checkpoints_failed, x.params)

TROUPE_INSPECT(kv_part, x.id, x.shard, x.row_begin, x.rows, x.numel)
TROUPE_INSPECT(kv_key_layout, x.id, x.name, x.dims, x.parts)
TROUPE_INSPECT(kv_init, x.worker, x.name, x.dims, x.value, x.offset)
TROUPE_INSPECT(kv_lookup, x.worker, x.name)
TROUPE_INSPECT(kv_define, x.name, x.parts, x.values)
TROUPE_INSPECT(kv_set_optimizer, x.worker, x.has_optimizer, x.config, x.schedule)
TROUPE_INSPECT(kv_barrier, x.worker)
TROUPE_INSPECT(kv_push, x.shard, x.worker, x.parts, x.base_versions, x.data, x.shared, x.lane, x.clock,
               x.piece_offset, x.piece_numel)
TROUPE_INSPECT(kv_push_ack, x.versions, x.staleness, x.late)
TROUPE_INSPECT(kv_pull, x.shard, x.worker, x.parts, x.rows, x.row_numel, x.reply_to, x.lane_reply, x.full, x.clock,
               x.piece_offset, x.piece_numel)
TROUPE_INSPECT(kv_pull_reply, x.shard, x.versions, x.data, x.shared, x.lane, x.piece_offset, x.piece_numel)
TROUPE_INSPECT(kv_collective, x.shard, x.worker, x.name, x.kind, x.op, x.root, x.dims, x.data, x.shared,
               x.reply_to, x.lane, x.lane_reply)
TROUPE_INSPECT(kv_collective_reply, x.ranks, x.dims, x.data, x.shared, x.lane)

#undef TROUPE_INSPECT

}  // namespace troupe
