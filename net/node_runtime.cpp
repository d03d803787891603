// node_runtime: configuration, publish and connect for plain and TLS nodes.
#include "net/node_runtime.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <malloc.h>
#include <sys/resource.h>

#include <thread>

#include "actors/protocol.hpp"
#include "net/handshake_ledger.hpp"

namespace troupe {

namespace {

caf::timespan seconds(double s) { return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s)); }

}  // namespace

void configure_node(caf::actor_system_config& cfg, const node_plan& plan) {
  tune_allocator();
  cfg.load<caf::io::middleman>();
  if (plan.tls.any()) {
    handshake_limits limits;
    limits.deadline = std::chrono::milliseconds(static_cast<std::int64_t>(plan.handshake_timeout_s * 1000));
    set_handshake_limits(limits);
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = plan.tls.certificate;
    cfg.openssl_key = plan.tls.key;
    cfg.openssl_cafile = plan.tls.ca;
    cfg.openssl_passphrase = plan.tls.passphrase;
  }
  cfg.set("middleman.heartbeat-interval", seconds(plan.heartbeat_s));
  cfg.set("middleman.connection-timeout", seconds(plan.connection_timeout_s));
  const unsigned cores = std::max(2u, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", static_cast<std::int64_t>(cores));
  cfg.set("scheduler.policy", caf::atom("sharing"));  // Note [Scheduler policy] in actors/runtime.cpp
  cfg.set("middleman.workers", std::int64_t{0});      // Note [Deserializing on the middleman thread]
  add_protocol_types(cfg);
}

void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Note [Deserializing on the middleman thread]
// With middleman.workers > 0 (CAF's default: 1), the middleman hands every message it has
// read to a BASP worker thread, which first copies the whole payload into a buffer of its
// own and then deserializes it: one extra copy of every tensor that arrives (40 MB for a
// 10M-float push) and a thread hop per message. With 0 the middleman deserializes from
// its read buffer itself. Measured with tools/bench/ps_throughput (10M floats, one shard,
// median of 7, same session): push + pull 72-74 ms -> 62 ms plain, 115 -> 101 ms over
// TLS. Reading and deserializing then share one thread, which on these 2-core hosts was
// never the bottleneck.

// Note [Heap-resident message buffers]
// Parameter and gradient messages are megabyte buffers allocated and freed every step.
// Above glibc's default mmap threshold each one would be a fresh mmap whose pages the
// kernel zero-fills on first touch; keeping them on the heap lets freed buffers be reused.
void tune_allocator() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

caf::io::middleman_actor connector_of(caf::actor_system& sys, bool tls) {
  return tls ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
}

caf::expected<caf::strong_actor_ptr> connect_to(caf::actor_system& sys, bool tls, const endpoint& to,
                                                std::chrono::milliseconds deadline,
                                                std::set<std::string>& signatures) {
  caf::scoped_actor self{sys};
  caf::expected<caf::strong_actor_ptr> out{caf::sec::request_timeout};
  self->request(connector_of(sys, tls), deadline, caf::connect_atom::value, to.host, to.port)
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>& sigs) {
            signatures = std::move(sigs);
            if (ptr)
              out = std::move(ptr);
            else
              out = caf::make_error(caf::sec::no_actor_published_at_port);
          },
          [&](caf::error& e) { out = std::move(e); });
  return out;
}

}  // namespace troupe
