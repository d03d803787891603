// kvstore: opening a store, keys and arrays checked, and each call split into messages
// per shard, with the handle to wait on (kvstore_waits.cpp); the collective calls are in
// kvstore_collectives.cpp, the store's state in kvstore_impl.hpp.
#include "client/kvstore.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "client/environment_join.hpp"
#include "client/kvstore_impl.hpp"
#include "client/local_transport.hpp"
#include "client/optimizer_spec.hpp"
#include "net/node_options.hpp"
#include "tensor/ops.hpp"

namespace troupe::kv {

namespace {

std::string name_of_key(const key& k) {
  if (const auto* i = std::get_if<std::int64_t>(&k)) return kv_key_name(*i);
  const std::string& s = std::get<std::string>(k);
  if (!valid_utf8(s))
    raise(fault{errc::malformed, "a string key is not valid UTF-8; keys are integers or UTF-8 strings"});
  return kv_key_name(std::string_view(s));
}

// Each shard's parts in messages of at most kv_max_message_floats (16 MiB), under every
// node's frame bound (Note [Bounded frames]); a part alone never exceeds it (kv_layout).
template <class Part>
std::vector<std::pair<std::uint32_t, std::vector<Part>>> messages(
    std::map<std::uint32_t, std::vector<Part>>& by_shard) {
  std::vector<std::pair<std::uint32_t, std::vector<Part>>> out;
  for (auto& [shard, parts] : by_shard) {
    std::int64_t floats = kv_max_message_floats;
    for (auto& p : parts) {
      if (floats + p.numel > kv_max_message_floats) out.emplace_back(shard, std::vector<Part>{}), floats = 0;
      floats += p.numel;
      out.back().second.push_back(std::move(p));
    }
  }
  return out;
}

sync_mode mode_of(const options& o) {
  std::string m = o.type == "local" ? o.mode : o.type.substr(5);
  auto parsed = parse_sync_mode(m);
  if (!parsed) raise(fault{errc::bad_job, "mode " + m + " is not sync, async or ssp"});
  return *parsed;
}

}  // namespace

kvstore::kvstore(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
kvstore::~kvstore() { close(); }

std::unique_ptr<kvstore> wrap_transport(std::unique_ptr<kv_transport> transport, const options& opts) {
  auto p = std::make_unique<kvstore::impl>();
  p->t = std::move(transport);
  p->opts = opts;
  return std::unique_ptr<kvstore>(new kvstore(std::move(p)));
}

std::unique_ptr<kvstore> kvstore::open(const options& opts) {
  if (opts.type == "local") return std::move(open_local_group(opts, 1).front());
  if (opts.type != "dist" && opts.type != "dist_sync" && opts.type != "dist_async" && opts.type != "dist_ssp" &&
      opts.type != "dist_allreduce")
    raise(fault{errc::bad_job,
                "type " + opts.type + " is not local, dist, dist_sync, dist_async, dist_ssp or dist_allreduce"});
  if (opts.timeout.count() <= 0) raise(fault{errc::bad_job, "timeout must be positive"});
  return wrap_transport(take(join_from_environment(current_environment(), opts.type)), opts);
}

std::vector<std::unique_ptr<kvstore>> kvstore::open_local_group(const options& opts, std::uint32_t workers) {
  if (opts.type != "local") raise(fault{errc::bad_job, "open_local_group needs type \"local\", not " + opts.type});
  if (workers < 1) raise(fault{errc::bad_job, "a local group needs at least one worker"});
  if (opts.servers < 1) raise(fault{errc::bad_job, "servers must be at least 1"});
  if (opts.staleness < 0) raise(fault{errc::bad_job, "staleness must be >= 0"});
  if (opts.timeout.count() <= 0) raise(fault{errc::bad_job, "timeout must be positive"});
  local_group_config cfg;
  cfg.mode = mode_of(opts);
  cfg.servers = opts.servers;
  cfg.staleness = opts.staleness;
  cfg.big_array_bound = opts.big_array_bound;
  std::vector<std::unique_ptr<kvstore>> out;
  for (auto& t : make_local_group(cfg, workers)) out.push_back(wrap_transport(std::move(t), opts));
  return out;
}

void kvstore::init(const key& k, const const_array& value) { init(std::vector<key>{k}, {value}); }

void kvstore::init(const std::vector<key>& keys, const std::vector<const_array>& values) {
  if (keys.size() != values.size())
    raise(fault{errc::bad_shape,
                "init: " + std::to_string(keys.size()) + " keys but " + std::to_string(values.size()) + " values"});
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::string name = name_of_key(keys[i]);
    {
      std::lock_guard lock(impl_->mu);
      impl_->check_open();
    }
    if (!values[i].data) raise(fault{errc::bad_shape, "init of key " + kv_key_display(name) + ": no data"});
    const_tensor_view v = floats(values[i].data, numel_of(values[i].shape));
    if (!all_finite(v))
      raise(
          fault{errc::not_finite, "init of key " + kv_key_display(name) + ": the value holds NaN or infinite values"});
    kv_key_layout k = take(impl_->t->init(name, values[i].shape, v));
    std::lock_guard lock(impl_->mu);
    impl_->remember(k);
  }
}

handle kvstore::push(const std::vector<key>& keys, const std::vector<const_array>& grads, int /*priority*/) {
  if (keys.size() != grads.size())
    raise(fault{errc::bad_shape,
                "push: " + std::to_string(keys.size()) + " keys but " + std::to_string(grads.size()) + " gradients"});
  std::map<std::uint32_t, std::vector<push_part>> by_shard;
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::string name = name_of_key(keys[i]);
    const kv_key_layout k = impl_->layout(name);
    impl_->check_shape(k, grads[i].shape, grads[i].data, "the gradient");
    if (!seen.insert(name).second)
      raise(fault{errc::duplicate, "push names key " + kv_key_display(name) + " twice; sum the gradients first"});
    if (!all_finite(floats(grads[i].data, k.numel())))
      raise(fault{errc::not_finite,
                  "the gradient of key " + kv_key_display(name) + " holds NaN or infinite values; nothing was pushed"});
    for (const auto& p : k.parts)
      by_shard[p.shard].push_back(
          {p.id, impl_->base_version(p.id), grads[i].data + p.row_begin * k.row_numel(), p.numel});
    names.push_back(name);
  }
  impl_->reset_staleness(names);
  impl_->count_step(names);
  auto batches = messages(by_shard);
  auto [h, done, memory] = impl_->begin(batches.size(), true);
  for (auto& [shard, parts] : batches) impl_->t->push(shard, std::move(parts), memory, done);
  return h;
}

handle kvstore::pull(const std::vector<key>& keys, const std::vector<array>& outs, int /*priority*/) {
  if (keys.size() != outs.size())
    raise(fault{errc::bad_shape,
                "pull: " + std::to_string(keys.size()) + " keys but " + std::to_string(outs.size()) + " outputs"});
  std::map<std::uint32_t, std::vector<pull_part>> by_shard;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const kv_key_layout k = impl_->layout(name_of_key(keys[i]));
    impl_->check_shape(k, outs[i].shape, outs[i].data, "the output");
    for (const auto& p : k.parts)
      by_shard[p.shard].push_back({p.id, outs[i].data + p.row_begin * k.row_numel(), p.numel, {}, 0});
  }
  auto batches = messages(by_shard);
  auto [h, done, memory] = impl_->begin(batches.size(), false);
  for (auto& [shard, parts] : batches) impl_->t->pull(shard, std::move(parts), memory, done);
  return h;
}

handle kvstore::row_sparse_pull(const key& key_, const std::vector<std::int64_t>& row_ids, const array& out,
                                int /*priority*/) {
  const kv_key_layout k = impl_->layout(name_of_key(key_));
  std::vector<std::int64_t> want{static_cast<std::int64_t>(row_ids.size())};
  want.insert(want.end(), k.dims.begin() + (k.dims.empty() ? 0 : 1), k.dims.end());
  if (!out.data || out.shape != want)
    raise(fault{errc::bad_shape, "row_sparse_pull of key " + kv_key_display(k.name) + ": the output has shape " +
                                     dims_str(out.shape) + ", " + std::to_string(row_ids.size()) + " rows need " +
                                     dims_str(want)});
  const std::int64_t row = k.row_numel();
  // Runs of consecutive positions whose rows lie in one part become one pull_part that
  // gathers straight into the output.
  std::map<std::uint32_t, std::vector<pull_part>> by_shard;
  for (std::size_t i = 0; i < row_ids.size();) {
    const std::int64_t r = row_ids[i];
    if (r < 0 || r >= k.rows())
      raise(fault{errc::bad_shape, "row_sparse_pull of key " + kv_key_display(k.name) + ": row " + std::to_string(r) +
                                       " is outside [0, " + std::to_string(k.rows()) + ")"});
    auto part = std::upper_bound(k.parts.begin(), k.parts.end(), r,
                                 [](std::int64_t v, const kv_part& p) { return v < p.row_begin; }) -
                1;
    pull_part pp{part->id, out.data + static_cast<std::int64_t>(i) * row, 0, {}, row};
    for (; i < row_ids.size() && row_ids[i] >= part->row_begin && row_ids[i] < part->row_begin + part->rows; ++i)
      pp.rows.push_back(row_ids[i] - part->row_begin);
    pp.numel = static_cast<std::int64_t>(pp.rows.size()) * row;
    by_shard[part->shard].push_back(std::move(pp));
  }
  auto batches = messages(by_shard);
  auto [h, done, memory] = impl_->begin(batches.size(), false);
  for (auto& [shard, parts] : batches) impl_->t->pull(shard, std::move(parts), memory, done);
  return h;
}

void kvstore::set_optimizer(const optimizer_spec& spec) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->check_open();
  }
  kv_optimizer opt = take(to_kv_optimizer(spec));
  if (auto e = impl_->t->set_optimizer(opt)) raise(*e);
}

void kvstore::barrier() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->check_open();
  }
  impl::blocked_scope blocked{*impl_};
  if (auto e = impl_->t->barrier(impl_->opts.timeout)) raise(*e);
}

std::uint32_t kvstore::rank() const { return impl_->t->rank(); }
std::uint32_t kvstore::num_workers() const { return impl_->t->workers(); }
std::int64_t kvstore::resumed_step() const { return impl_->t->resumed_step(); }
std::optional<std::int64_t> kvstore::restored_step() const { return impl_->t->restored_step(); }
std::string kvstore::type() const { return impl_->opts.type == "dist" ? "dist_" + mode() : impl_->opts.type; }
std::string kvstore::mode() const { return std::string(name_of(impl_->t->mode())); }

std::int64_t kvstore::staleness(const key& k) const {
  const std::string name = name_of_key(k);
  std::lock_guard lock(impl_->mu);
  auto it = impl_->staleness.find(name);
  return it == impl_->staleness.end() ? 0 : it->second;
}

transfer_stats kvstore::transfers() const { return impl_->t->transfers(); }

void kvstore::close() {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->closed) return;
    impl_->closed = true;
  }
  impl_->t->close();
}

}  // namespace troupe::kv
