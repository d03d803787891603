// member_wiring: how a pipeline_stage member reaches its peers once welcomed. In one
// process the welcome's handles are used as they are; in a cluster it connects to each
// shard and to its next pipeline stage by address (the previous stage is wired by its
// hello), and to its ring neighbours (ring_wiring.cpp), retrying until --request-timeout;
// then the core is told it is wired.
#include <spdlog/spdlog.h>

#include <set>
#include <utility>

#include "actors/stage_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::stage_shell {

namespace {

using steady = std::chrono::steady_clock;

}  // namespace

// Connects to the actor published at host:port, retrying (with a growing pause) until
// `deadline`: a node may still be busy with other handshakes when many start at once.
void connect_peer(stage_pointer self, std::string peer, std::string host, std::uint16_t port,
                  std::chrono::steady_clock::time_point deadline,
                  std::function<void(caf::strong_actor_ptr)> on_connected, std::chrono::milliseconds pause) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
  if (self->state.opts.expect_peer) self->state.opts.expect_peer(host, port, peer.starts_with("shard") ? "server" : "worker");
  self->request(*self->state.opts.connector, std::max(left, std::chrono::milliseconds(1)), caf::connect_atom::value,
                host, port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (!ptr) {
              fail(self, {errc::shard_lost,
                          "nothing is published at " + host + ":" + std::to_string(port) + " where " + peer +
                              " should be"});
              return;
            }
            on_connected(std::move(ptr));
          },
          [=](caf::error& e) {
            if (steady::now() + pause < deadline) {
              spdlog::warn("{}: {} at {}:{} not reachable yet ({}); retrying", who(self), peer, host, port,
                           describe(e));
              self->delayed_send(self, pause, connect_retry{peer});
              self->state.retries[peer] = [=] {
                connect_peer(self, peer, host, port, deadline, on_connected, pause * 2);
              };
              return;
            }
            fail(self, {peer.starts_with("shard") ? errc::shard_lost : errc::stage_lost,
                        "cannot reach " + peer + " at " + host + ":" + std::to_string(port) + ": " + describe(e)});
          });
}

namespace {

// A neighbour that dies takes this stage down with it: its pipeline cannot finish a step.
// One that finishes normally has sent everything this stage needs from it.
void wired(stage_pointer self) {
  auto& st = self->state;
  if (st.prev) self->monitor(st.prev);
  if (st.next) self->monitor(st.next);
  if (st.ring_prev) self->monitor(st.ring_prev);
  if (st.ring_next && st.ring_next != st.ring_prev) self->monitor(st.ring_next);
  wire_links(self);
  drive(self, [&](member_core& c) { return c.on_wired(); });
}

// Wires the previous stage from its hello, once the welcome said who that must be.
void take_hello(stage_pointer self, const stage_actor& sender, const stage_hello& h) {
  auto& st = self->state;
  if (!sent_by(caf::actor_cast<caf::strong_actor_ptr>(sender), st.prev_identity)) {
    const std::string peer = caf::to_string(sender);
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, peer))
      spdlog::warn("{}: refused a hello from {}, which is not its previous stage", who(self), peer);
    return;
  }
  if (!st.on_prev_hello || h.replica != st.core->replica() || h.stage + 1 != st.core->stage()) {
    spdlog::warn("{}: ignored a hello from {} claiming stage {} of replica {}", who(self), caf::to_string(sender),
                 h.stage, h.replica);
    return;
  }
  st.prev = sender;
  auto done = std::move(st.on_prev_hello);
  st.on_prev_hello = nullptr;
  done();
}

}  // namespace

// Note [One connection per neighbour pair]
// When two CAF nodes connect to each other at the same moment, BASP keeps one of the two
// connections and drops the other, and the proxies made on the dropped one die with
// remote_link_unreachable: both stages then saw their neighbour "die" at start-up. So only
// the earlier stage connects; it then sends stage_hello, and the later stage takes the
// hello's sender as its previous stage (the one connection carries both directions).
void connect_peers(stage_pointer self, worker_welcome& w) {
  auto& st = self->state;
  const member_assignment& place = st.core->place();
  st.shards = std::move(w.shards);
  st.shards.resize(place.table.shards());  // by address: filled below
  st.prev = w.prev;
  st.next = w.next;
  st.prev_identity = w.prev_identity;
  st.ring_prev = w.ring_prev;
  st.ring_next = w.ring_next;
  const bool direct = st.opts.connector && !place.shard_hosts.empty() && !place.shard_hosts.front().empty();
  const bool neighbours_by_address = st.opts.connector && (!place.prev_host.empty() || !place.next_host.empty());
  const bool ring_by_address = st.opts.connector && !place.ring_next_host.empty();
  if (!direct && !neighbours_by_address && !ring_by_address) {
    wired(self);
    return;
  }
  const auto& active = st.core->active_shards();
  // One more than the connections to wait for: the last is taken off once all are asked for.
  auto pending = std::make_shared<std::size_t>((direct ? active.size() : 0) + !place.prev_host.empty() +
                                               !place.next_host.empty() + 1);
  auto one_done = [=] {
    if (--*pending == 0) wired(self);
  };
  const auto deadline = steady::now() + request_timeout(self);
  if (ring_by_address) wire_ring(self, w, deadline, pending, one_done);
  if (direct)
    for (std::uint32_t s : active)
      connect_peer(self, "shard " + std::to_string(s), place.shard_hosts[s], place.shard_ports[s], deadline,
                   [=](caf::strong_actor_ptr p) {
                     self->state.shards[s] = caf::actor_cast<shard_actor>(std::move(p));
                     one_done();
                   });
  // Only stage i connects to stage i + 1 (Note [One connection per neighbour pair]); the
  // previous stage is wired by its hello.
  if (!place.prev_host.empty()) {
    st.prev = stage_actor{};
    st.on_prev_hello = one_done;
    if (auto h = std::exchange(st.early_hello, std::nullopt)) take_hello(self, h->first, h->second);
    if (st.on_prev_hello) self->delayed_send(self, request_timeout(self), hello_deadline{});
  }
  if (!place.next_host.empty())
    connect_peer(self, "stage " + std::to_string(st.core->stage() + 1), place.next_host, place.next_port, deadline,
                 [=](caf::strong_actor_ptr p) {
                   auto& s = self->state;
                   s.next = caf::actor_cast<stage_actor>(std::move(p));
                   self->send(s.next, hello_atom::value, stage_hello{s.core->replica(), s.core->stage()});
                   one_done();
                 });
  one_done();
}

void on_stage_hello(stage_pointer self, const stage_hello& h) {
  auto& st = self->state;
  auto sender = caf::actor_cast<stage_actor>(self->current_sender());
  if (st.core->phase() == member_phase::joining) {
    if (!st.early_hello) st.early_hello.emplace(std::move(sender), h);
    return;
  }
  take_hello(self, sender, h);
}

void on_hello_deadline(stage_pointer self) {
  auto& st = self->state;
  on_ring_hello_deadline(self);
  if (st.on_prev_hello)
    fail(self, {errc::stage_lost, who(self) + " never heard from stage " + std::to_string(st.core->stage() - 1) +
                                      " within --request-timeout; is that node reachable?"});
}

void on_connect_retry(stage_pointer self, const std::string& peer) {
  auto it = self->state.retries.find(peer);
  if (it == self->state.retries.end()) return;
  auto retry = std::move(it->second);
  self->state.retries.erase(it);
  retry();
}

}  // namespace troupe::stage_shell
