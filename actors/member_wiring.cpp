// member_wiring: how a pipeline_stage member joins its job. In a cluster it connects to
// each shard and to its next pipeline stage by address (the previous stage is wired by
// its hello), and with --local-reduce it opens its local group's communicator; then the
// training loop in pipeline_stage.cpp starts.
#include <unistd.h>

#include <algorithm>
#include <set>
#include <utility>

#include "actors/member_state.hpp"

namespace troupe::member_detail {

// Opens this member's communicator: the leader makes the id and sends it through the
// coordinator; the others wait for it (at most --request-timeout). Opening blocks this
// (detached) actor until every member has opened, or fails at the timeout.
void open_group(stage_pointer self) {
  auto& st = self->state;
  if (group_leader(st) && !st.group_id_bytes) {
    try {
      st.group_id_bytes = group_comm::new_id(*st.backend);
    } catch (const backend_error& e) {
      fail(self, make_error(errc::stage_lost, who(st) + ": cannot make its local group's id: " + e.what()));
      return;
    }
    self->send(st.coordinator, group_atom::value, group_id{st.rank, *st.group_id_bytes});
  }
  if (!st.group_id_bytes) {
    if (!st.awaiting_group) {
      st.awaiting_group = true;
      self->delayed_send(self, st.timeout, group_atom::value, group_id{st.rank, {}});
    }
    return;
  }
  st.awaiting_group = false;
  const auto index = std::find(st.group.begin(), st.group.end(), st.rank) - st.group.begin();
  try {
    st.comm = std::make_unique<group_comm>(*st.backend, *st.group_id_bytes, static_cast<int>(st.group.size()),
                                           static_cast<int>(index), st.timeout);
  } catch (const backend_error& e) {
    fail(self, make_error(errc::stage_lost, who(st) + ": its local group did not form: " + e.what()));
    return;
  }
  start_training(self);
}

// Connects to the actor published at host:port, retrying (with a growing pause) until
// `deadline`: a node may still be busy with other handshakes when many start at once.
void connect_peer(stage_pointer self, std::string peer, std::string host, std::uint16_t port,
                  clock_type::time_point deadline, std::function<void(caf::strong_actor_ptr)> on_connected,
                  std::chrono::milliseconds pause = std::chrono::milliseconds(100)) {
  auto& st = self->state;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
  self->request(*st.opts.connector, std::max(left, std::chrono::milliseconds(1)), caf::connect_atom::value, host, port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (!ptr) {
              fail(self, make_error(errc::shard_lost, "nothing is published at " + host + ":" + std::to_string(port) +
                                                          " where " + peer + " should be"));
              return;
            }
            on_connected(std::move(ptr));
          },
          [=](caf::error& e) {
            if (clock_type::now() + pause < deadline) {
              spdlog::warn("{}: {} at {}:{} not reachable yet ({}); retrying", who(self->state), peer, host, port,
                           describe(e));
              self->delayed_send(self, pause, connect_retry_atom::value, peer);
              self->state.retries[peer] = [=] {
                connect_peer(self, peer, host, port, deadline, on_connected, pause * 2);
              };
              return;
            }
            fail(self, make_error(peer.starts_with("shard") ? errc::shard_lost : errc::stage_lost,
                                  "cannot reach " + peer + " at " + host + ":" + std::to_string(port) + ": " +
                                      describe(e)));
          });
}

// A neighbour that dies takes this stage down with it: its pipeline cannot finish a step.
// One that finishes normally has sent everything this stage needs from it.
void watch_neighbour(stage_pointer self, const caf::actor& n) {
  if (n) self->monitor(n);
}

// Wires the previous stage from its hello, once the welcome said who that must be.
void take_hello(stage_pointer self, const caf::actor& sender, std::uint32_t replica, std::uint32_t stage) {
  auto& st = self->state;
  if (!st.on_prev_hello || replica != st.replica || stage + 1 != st.stage) {
    spdlog::warn("{}: ignored a hello from {} claiming stage {} of replica {}", who(st), caf::to_string(sender), stage,
                 replica);
    return;
  }
  st.prev = sender;
  auto done = std::move(st.on_prev_hello);
  st.on_prev_hello = nullptr;
  done();
}

// In a cluster the welcome names each shard's and neighbour's address: connect to every
// one directly (through the node's plain or TLS middleman), then start.
//
// Note [One connection per neighbour pair]
// When two CAF nodes connect to each other at the same moment, BASP keeps one of the two
// connections and drops the other, and the proxies made on the dropped one die with
// remote_link_unreachable: both stages then saw their neighbour "die" at start-up. So only
// the earlier stage connects; it then sends stage_hello, and the later stage takes the
// hello's sender as its previous stage (the one connection carries both directions).
void connect_peers(stage_pointer self, worker_welcome& w) {
  auto& st = self->state;
  const bool direct = st.opts.connector && !w.shard_hosts.empty() && !w.shard_hosts.front().empty();
  const bool neighbours_by_address = st.opts.connector && (!w.prev_host.empty() || !w.next_host.empty());
  if (!direct && !neighbours_by_address) {
    watch_neighbour(self, st.prev);
    watch_neighbour(self, st.next);
    start_training(self);
    return;
  }
  auto pending = std::make_shared<std::size_t>((direct ? st.active.size() : 0) + !w.prev_host.empty() +
                                               !w.next_host.empty());
  auto one_done = [=] {
    if (--*pending > 0) return;
    watch_neighbour(self, self->state.prev);
    watch_neighbour(self, self->state.next);
    start_training(self);
  };
  const auto deadline = clock_type::now() + st.timeout;
  if (direct)
    for (std::uint32_t s : st.active)
      connect_peer(self, "shard " + std::to_string(s), w.shard_hosts[s], w.shard_ports[s], deadline,
                   [=](caf::strong_actor_ptr p) {
                     self->state.shards[s] = caf::actor_cast<shard_actor>(std::move(p));
                     one_done();
                   });
  // Only stage i connects to stage i + 1 (Note [One connection per neighbour pair]); the
  // previous stage is wired by its hello.
  if (!w.prev_host.empty()) {
    st.prev = caf::actor{};
    st.on_prev_hello = one_done;
    if (auto h = std::exchange(st.early_hello, std::nullopt)) take_hello(self, h->sender, h->replica, h->stage);
    if (st.on_prev_hello)
      self->delayed_send(self, st.timeout, stage_hello_atom::value, std::uint32_t{0}, std::uint32_t{0});
  }
  if (!w.next_host.empty())
    connect_peer(self, "stage " + std::to_string(st.stage + 1), w.next_host, w.next_port, deadline,
                 [=](caf::strong_actor_ptr p) {
                   self->state.next = caf::actor_cast<caf::actor>(std::move(p));
                   self->send(self->state.next, stage_hello_atom::value, self->state.replica, self->state.stage);
                   one_done();
                 });
  if (*pending == 0) one_done();
}

std::string locality(device d) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return d.kind == device_kind::cuda ? "cuda@" + std::string(host)
                                     : "cpu@" + std::string(host) + ":" + std::to_string(::getpid());
}

void on_stage_hello(stage_pointer self, std::uint32_t replica, std::uint32_t stage) {
  auto& st = self->state;
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (sender == self) {  // the deadline set in connect_peers
    if (st.on_prev_hello)
      fail(self, make_error(errc::stage_lost, who(st) + " never heard from stage " + std::to_string(st.stage - 1) +
                                               " within --request-timeout; is that node reachable?"));
    return;
  }
  if (!st.welcomed && !st.early_hello) {
    st.early_hello = member_state::hello{std::move(sender), replica, stage};
    return;
  }
  take_hello(self, sender, replica, stage);
}

void on_group_id(stage_pointer self, group_id& g) {
  auto& st = self->state;
  if (caf::actor_cast<caf::actor>(self->current_sender()) == self) {  // the deadline set in open_group
    if (st.awaiting_group)
      fail(self, make_error(errc::stage_lost, who(st) + " never received its local group's id from worker " +
                                               std::to_string(st.group.empty() ? 0 : st.group.front()) +
                                               " within --request-timeout"));
    return;
  }
  if (st.group_id_bytes || g.id.empty()) return;
  if (caf::actor_cast<caf::actor_addr>(self->current_sender()) != st.coordinator.address()) {
    spdlog::warn("{}: ignored a local group id from {}: only the coordinator relays them", who(st),
                 caf::to_string(self->current_sender()));
    return;
  }
  st.group_id_bytes = std::move(g.id);
  if (st.awaiting_group) open_group(self);
}

void on_connect_retry(stage_pointer self, const std::string& peer) {
  auto it = self->state.retries.find(peer);
  if (it == self->state.retries.end()) return;
  auto retry = std::move(it->second);
  self->state.retries.erase(it);
  retry();
}

}  // namespace troupe::member_detail
