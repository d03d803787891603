// kvstore: keys and arrays checked, calls split into one message per shard, handles.
#include "client/kvstore.hpp"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "client/collectives.hpp"
#include "client/kv_transport.hpp"
#include "client/local_transport.hpp"
#include "client/optimizer_spec.hpp"
#include "client/environment_join.hpp"
#include "net/node_options.hpp"
#include "tensor/ops.hpp"

namespace troupe::kv {

namespace {

[[noreturn]] void raise(const fault& f) { throw error(to_string(f.code), f.detail); }

template <class T>
T take(or_fault<T>&& r) {
  if (auto* f = std::get_if<fault>(&r)) raise(*f);
  return std::get<T>(std::move(r));
}

std::string name_of_key(const key& k) {
  if (const auto* i = std::get_if<std::int64_t>(&k)) return kv_key_name(*i);
  const std::string& s = std::get<std::string>(k);
  if (!valid_utf8(s)) raise(fault{errc::malformed, "a string key is not valid UTF-8; keys are integers or UTF-8 strings"});
  return kv_key_name(std::string_view(s));
}

std::int64_t numel_of(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

// Each shard's parts in messages of at most kv_max_message_floats (16 MiB), under every
// node's frame bound (Note [Bounded frames]); a part alone never exceeds it (kv_layout).
template <class Part>
std::vector<std::pair<std::uint32_t, std::vector<Part>>> messages(std::map<std::uint32_t, std::vector<Part>>& by_shard) {
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

struct kvstore::impl {
  std::unique_ptr<kv_transport> t;
  options opts;

  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
  std::map<std::string, kv_key_layout> keys;          // layouts seen, by canonical name
  std::map<kv_part_id, std::string> part_key;         // which key a part belongs to
  std::map<kv_part_id, std::int64_t> pulled_version;  // the version this worker last pulled
  std::map<std::string, std::int64_t> staleness;      // of each key's last push
  struct op {
    std::size_t pending = 0;
    std::optional<fault> error;
    std::shared_ptr<caller_memory> memory;  // the gate on the arrays of its calls
  };
  std::map<handle, op> ops;  // in flight, or failed and not yet waited for
  handle next = 1;

  std::uint64_t unnamed_collectives = 0;
  // The next collective's call, named as kvstore::allreduce's contract says.
  collective_call collective(const std::string& what, const std::string& name);

  void check_open() {
    if (closed) raise(fault{errc::closed, "the store was closed; open a new one"});
  }

  void remember(const kv_key_layout& k) {
    for (const auto& p : k.parts) part_key[p.id] = k.name;
    keys[k.name] = k;
  }

  // The layout of a key some worker initialised (asking the job when it is new here).
  kv_key_layout layout(const std::string& name) {
    {
      std::lock_guard lock(mu);
      check_open();
      if (auto it = keys.find(name); it != keys.end()) return it->second;
    }
    kv_key_layout k = take(t->lookup(name));
    std::lock_guard lock(mu);
    remember(k);
    return k;
  }

  void check_shape(const kv_key_layout& k, const std::vector<std::int64_t>& shape, const void* data,
                   const char* what) {
    if (!data) raise(fault{errc::bad_shape, std::string(what) + " of key " + kv_key_display(k.name) + ": no data"});
    if (shape != k.dims)
      raise(fault{errc::bad_shape, std::string(what) + " of key " + kv_key_display(k.name) + " has shape " +
                                       dims_str(shape) + "; the key was initialised with " + dims_str(k.dims)});
  }

  // Registers an operation of `requests` shard messages and returns its handle with the
  // completion each message calls and the gate on the caller's arrays.
  struct begun {
    handle h;
    completion done;
    std::shared_ptr<caller_memory> memory;
  };
  begun begin(std::size_t requests, bool is_push) {
    std::lock_guard lock(mu);
    const handle h = next++;
    auto memory = std::make_shared<caller_memory>();
    if (requests > 0) ops[h] = {requests, std::nullopt, memory};  // nothing to send: done at once
    auto done = [this, h, is_push](std::optional<fault> err, std::vector<part_result> results) {
      std::lock_guard lock(mu);
      for (const auto& r : results) {
        if (is_push) {
          auto& s = staleness[part_key[r.part]];
          s = std::max(s, r.staleness);
        } else {
          pulled_version[r.part] = r.version;
        }
      }
      auto it = ops.find(h);
      if (it == ops.end()) return;
      if (err && !it->second.error) it->second.error = std::move(err);
      if (--it->second.pending == 0 && !it->second.error) ops.erase(it);
      cv.notify_all();
    };
    return {h, done, memory};
  }

  // Gives the arrays of the operations `which` picks (all of them that are unsettled)
  // back to the caller: Note [Abandoned calls]. Called with `lock` held; returns with it.
  // How many it abandoned.
  template <class Pick>
  std::size_t abandon(std::unique_lock<std::mutex>& lock, Pick which) {
    std::vector<std::shared_ptr<caller_memory>> gates;
    for (auto it = ops.begin(); it != ops.end();) {
      if (which(it->first) && it->second.pending > 0) {
        gates.push_back(it->second.memory);
        it = ops.erase(it);
      } else {
        ++it;
      }
    }
    lock.unlock();  // a copy into the arrays may be under way, and its completion takes mu
    for (auto& g : gates) g->revoke();
    lock.lock();
    return gates.size();
  }

  bool await_one(std::unique_lock<std::mutex>& lock, handle h, std::chrono::milliseconds d);
  bool await_all(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds d);

  // Before a push: per-key maxima are recomputed from this push's parts.
  void reset_staleness(const std::vector<std::string>& names) {
    std::lock_guard lock(mu);
    for (const auto& n : names) staleness[n] = 0;
  }

  std::int64_t base_version(kv_part_id p) {
    std::lock_guard lock(mu);
    auto it = pulled_version.find(p);
    return it == pulled_version.end() ? 0 : it->second;
  }
};

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
  if (opts.type != "dist" && opts.type != "dist_sync" && opts.type != "dist_async" && opts.type != "dist_ssp")
    raise(fault{errc::bad_job, "type " + opts.type + " is not local, dist, dist_sync, dist_async or dist_ssp"});
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
    raise(fault{errc::bad_shape, "init: " + std::to_string(keys.size()) + " keys but " + std::to_string(values.size()) +
                                     " values"});
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::string name = name_of_key(keys[i]);
    {
      std::lock_guard lock(impl_->mu);
      impl_->check_open();
    }
    if (!values[i].data) raise(fault{errc::bad_shape, "init of key " + kv_key_display(name) + ": no data"});
    const_tensor_view v = floats(values[i].data, numel_of(values[i].shape));
    if (!all_finite(v))
      raise(fault{errc::not_finite, "init of key " + kv_key_display(name) + ": the value holds NaN or infinite values"});
    kv_key_layout k = take(impl_->t->init(name, values[i].shape, v));
    std::lock_guard lock(impl_->mu);
    impl_->remember(k);
  }
}

handle kvstore::push(const std::vector<key>& keys, const std::vector<const_array>& grads, int /*priority*/) {
  if (keys.size() != grads.size())
    raise(fault{errc::bad_shape, "push: " + std::to_string(keys.size()) + " keys but " + std::to_string(grads.size()) +
                                     " gradients"});
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
      raise(fault{errc::not_finite, "the gradient of key " + kv_key_display(name) +
                                        " holds NaN or infinite values; nothing was pushed"});
    for (const auto& p : k.parts)
      by_shard[p.shard].push_back({p.id, impl_->base_version(p.id), grads[i].data + p.row_begin * k.row_numel(), p.numel});
    names.push_back(name);
  }
  impl_->reset_staleness(names);
  auto batches = messages(by_shard);
  auto [h, done, memory] = impl_->begin(batches.size(), true);
  for (auto& [shard, parts] : batches) impl_->t->push(shard, std::move(parts), memory, done);
  return h;
}

handle kvstore::pull(const std::vector<key>& keys, const std::vector<array>& outs, int /*priority*/) {
  if (keys.size() != outs.size())
    raise(fault{errc::bad_shape, "pull: " + std::to_string(keys.size()) + " keys but " + std::to_string(outs.size()) +
                                     " outputs"});
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
                                 [](std::int64_t v, const kv_part& p) { return v < p.row_begin; }) - 1;
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

namespace {
[[noreturn]] void no_answer(std::chrono::milliseconds timeout) {
  raise(fault{errc::timed_out, "no answer from the shards within " + std::to_string(timeout.count()) +
                                   " ms; a shard may be lost or a sync round waits for a worker that has not pushed. "
                                   "The call was abandoned: its arrays are yours again"});
}
}  // namespace

// Waits at most `d` for operation h; once it is settled, forgets it and throws its error.
bool kvstore::impl::await_one(std::unique_lock<std::mutex>& lock, handle h, std::chrono::milliseconds d) {
  if (h == 0 || h >= next)
    raise(fault{errc::bad_job, "wait: handle " + std::to_string(h) + " was never returned by this store"});
  auto settled = [&] {
    auto it = ops.find(h);
    return it == ops.end() || it->second.pending == 0;
  };
  if (!cv.wait_for(lock, d, settled)) return false;
  auto it = ops.find(h);
  if (it == ops.end()) return true;
  auto err = it->second.error;
  ops.erase(it);
  if (err) raise(*err);
  return true;
}

// Waits at most `d` for every operation; once all are settled, forgets them and throws
// the first error.
bool kvstore::impl::await_all(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds d) {
  auto settled = [&] {
    return std::all_of(ops.begin(), ops.end(), [](auto& o) { return o.second.pending == 0; });
  };
  if (!cv.wait_for(lock, d, settled)) return false;
  std::optional<fault> first;
  for (auto& [h, o] : ops)
    if (o.error && !first) first = o.error;
  ops.clear();
  if (first) raise(*first);
  return true;
}

void kvstore::wait(handle h) { wait(h, impl_->opts.timeout); }

void kvstore::wait(handle h, std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  if (impl_->await_one(lock, h, timeout)) return;
  if (impl_->abandon(lock, [h](handle x) { return x == h; }) == 0) {  // settled meanwhile
    impl_->await_one(lock, h, std::chrono::milliseconds(0));
    return;
  }
  no_answer(timeout);
}

void kvstore::wait_all() { wait_all(impl_->opts.timeout); }

void kvstore::wait_all(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  if (impl_->await_all(lock, timeout)) return;
  if (impl_->abandon(lock, [](handle) { return true; }) == 0) {
    impl_->await_all(lock, std::chrono::milliseconds(0));
    return;
  }
  impl_->ops.clear();  // what settled with an error is part of what timed out
  no_answer(timeout);
}

bool kvstore::wait_for(handle h, std::chrono::milliseconds d) {
  std::unique_lock lock(impl_->mu);
  return impl_->await_one(lock, h, d);
}

bool kvstore::wait_all_for(std::chrono::milliseconds d) {
  std::unique_lock lock(impl_->mu);
  return impl_->await_all(lock, d);
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
  if (auto e = impl_->t->barrier(impl_->opts.timeout)) raise(*e);
}

collective_call kvstore::impl::collective(const std::string& what, const std::string& name) {
  std::lock_guard lock(mu);
  check_open();
  collective_call c;
  c.name = name.empty() ? what + "#" + std::to_string(unnamed_collectives++) : "user:" + name;
  c.timeout = opts.timeout;
  return c;
}

void kvstore::allreduce(const const_array& in, const array& out, reduction op, const std::string& name) {
  const auto call = impl_->collective("allreduce", name);
  if (!in.data || !out.data) raise(fault{errc::bad_shape, "allreduce: no data"});
  if (in.shape != out.shape)
    raise(fault{errc::bad_shape, "allreduce: the input has shape " + dims_str(in.shape) + " but the output " +
                                     dims_str(out.shape)});
  const reduce_op r = op == reduction::sum ? reduce_op::sum : op == reduction::max ? reduce_op::max : reduce_op::avg;
  if (auto f = run_allreduce(*impl_->t, call, in.data, out.data, numel_of(in.shape), r)) raise(*f);
}

void kvstore::broadcast(const array& value, std::uint32_t root, const std::string& name) {
  const auto call = impl_->collective("broadcast", name);
  if (!value.data) raise(fault{errc::bad_shape, "broadcast: no data"});
  if (auto f = run_broadcast(*impl_->t, call, value.data, numel_of(value.shape), root)) raise(*f);
}

kvstore::gathered kvstore::allgather(const const_array& in, const std::string& name) {
  const auto call = impl_->collective("allgather", name);
  if (!in.data && numel_of(in.shape) > 0) raise(fault{errc::bad_shape, "allgather: no data"});
  auto r = run_allgather(*impl_->t, call, in.data, in.shape);
  if (auto* f = std::get_if<fault>(&r)) raise(*f);
  auto& g = std::get<gathered_tensor>(r);
  return {std::move(g.data), std::move(g.dims), std::move(g.ranks), std::move(g.rows)};
}

std::uint32_t kvstore::rank() const { return impl_->t->rank(); }
std::uint32_t kvstore::num_workers() const { return impl_->t->workers(); }
std::string kvstore::type() const {
  return impl_->opts.type == "dist" ? "dist_" + mode() : impl_->opts.type;
}
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
