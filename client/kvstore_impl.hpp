// kvstore_impl: what a kvstore keeps behind its interface, for the files that implement it
// (kvstore.cpp: keys and calls; kvstore_waits.cpp: waiting on handles;
// kvstore_collectives.cpp: the collective calls): its transport, the layouts of the keys
// it has seen, the versions it pulled and the staleness it was told, the operations in
// flight with the gate on each one's arrays (Note [Abandoned calls]), and its loop's steps.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/caller_memory.hpp"
#include "client/collectives.hpp"
#include "client/kv_transport.hpp"
#include "client/kvstore.hpp"
#include "client/step_meter.hpp"

namespace troupe::kv {

// A fault, thrown to the caller as a kv::error.
[[noreturn]] inline void raise(const fault& f) { throw error(to_string(f.code), f.detail); }

// The value, or its fault thrown.
template <class T>
T take(or_fault<T>&& r) {
  if (auto* f = std::get_if<fault>(&r)) raise(*f);
  return std::get<T>(std::move(r));
}

// Elements of an array of these dimensions.
inline std::int64_t numel_of(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

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
  step_meter steps;  // the loop's steps, for its step reports (Note [Steps of a user's loop])

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

  void check_shape(const kv_key_layout& k, const std::vector<std::int64_t>& shape, const void* data, const char* what) {
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

  // A push of `names`: when it ends one of the loop's steps, the job is told.
  void count_step(const std::vector<std::string>& names) {
    std::optional<step_meter::step> ended;
    {
      std::lock_guard lock(mu);
      ended = steps.pushed(names, step_meter::clock::now());
    }
    if (ended) t->report_step(ended->number, ended->busy_seconds);
  }

  // Counts the time its scope takes as time the caller was blocked in the store.
  struct blocked_scope {
    impl& store;
    step_meter::clock::time_point start = step_meter::clock::now();
    ~blocked_scope() {
      std::lock_guard lock(store.mu);
      store.steps.blocked(step_meter::clock::now() - start);
    }
  };

  std::int64_t base_version(kv_part_id p) {
    std::lock_guard lock(mu);
    auto it = pulled_version.find(p);
    return it == pulled_version.end() ? 0 : it->second;
  }
};

}  // namespace troupe::kv
