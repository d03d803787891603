// kv_job: a key-value job's actors in one process (the kv coordinator and shard servers,
// by handle) with a store joined as each of its members, as a launched job has them; and
// the helpers the tests of the stores over it share.
#pragma once

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/coordinator.hpp"
#include "actors/runtime.hpp"
#include "actors/shard_server.hpp"
#include "client/kvstore.hpp"
#include "client/remote_transport.hpp"
#include "tensor/grad_codec.hpp"

namespace troupe::test {

// The same-host fast path's tags: the members' and the shards' (empty: off).
struct fast_path_tags {
  std::string member, shard;
};

// A job of `workers` members and `servers` shards; stores[r] is rank r's store.
struct job_fixture {
  explicit job_fixture(sync_mode mode, std::uint32_t workers = 2, std::uint32_t servers = 2, std::int64_t bound = 0,
                       fast_path_tags tags = {}, grad_codec compression = {}, grad_codec pull_precision = {}) {
    configure_in_process(cfg);
    sys.emplace(cfg);
    job_spec job;
    job.kv = true;
    job.job_id = "kv-test";
    job.mode = mode;
    job.workers = workers;
    job.servers = servers;
    job.big_array_bound = bound;
    job.request_timeout_ms = 5000;
    job.compression = compression;
    job.pull_precision = pull_precision;
    coordinator = spawn_coordinator(*sys, job, model::none(), nullptr, {});
    for (std::uint32_t s = 0; s < servers; ++s) {
      shards.push_back(spawn_shard_server(*sys, coordinator, "kv-test", std::chrono::seconds(5), {}, tags.shard));
      join_as_shard(shards.back(), "", 0);
    }
    // Every member's join completes when the job starts, once all have joined.
    std::vector<std::future<std::unique_ptr<kv::kvstore>>> joins;
    for (std::uint32_t w = 0; w < workers; ++w)
      joins.push_back(std::async(std::launch::async, [this, tags] {
        kv::member_options o;
        o.coordinator = coordinator;
        o.connect_timeout = std::chrono::seconds(5);
        auto t = kv::join_in_process(*sys, o, "kv-test", tags.member);
        if (auto* f = std::get_if<fault>(&t)) throw std::runtime_error(to_string(*f));
        kv::options opts;
        opts.type = "dist_" + std::string(name_of(std::get<0>(t)->mode()));
        opts.timeout = std::chrono::seconds(5);
        return kv::wrap_transport(std::move(std::get<0>(t)), opts);
      }));
    for (auto& j : joins) stores.push_back(j.get());
    std::sort(stores.begin(), stores.end(), [](auto& a, auto& b) { return a->rank() < b->rank(); });
  }
  ~job_fixture() {
    stores.clear();
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    for (auto& s : shards) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  }

  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  local_coordinator_actor coordinator;
  std::vector<local_shard_actor> shards;
  std::vector<std::unique_ptr<kv::kvstore>> stores;
};

// The code of the kv::error f throws, or "no error".
template <class F>
std::string code_of(F&& f) {
  try {
    f();
  } catch (const kv::error& e) {
    return e.code();
  }
  return "no error";
}

inline kv::optimizer_spec sgd(float lr) {
  kv::optimizer_spec s;
  s.lr = lr;
  return s;
}


}  // namespace troupe::test
