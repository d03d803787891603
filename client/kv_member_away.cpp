// kv_member_away: a key-value member whose shard was lost and is replaced while its loop
// goes on (Note [A shard away]), and its connections to shards by address.
#include <spdlog/spdlog.h>

#include "client/kv_member_state.hpp"

namespace troupe::kv::member_shell {

// Note [A shard away]
// In a job that replaces a lost shard (Note [Replacing a key-value shard] in
// core/job_shard_replacement.cpp: --checkpoint-dir, --on-shard-loss not fail) the member
// does not fail the store's calls when a shard is lost (killed, or its node gone: a shard
// the coordinator stops, at the job's end or failure, says why, and that ends the calls as
// in any job). It marks the shard away, says so in one info line, and until the coordinator says the shard is back (kv_shard_back):
//   - calls to it are held, unsent, in order, and sent to the replacement once it is
//     there; the other shards' calls go on, so the loop is held only where it waits for
//     one of them;
//   - a pull that was in flight is asked again of the replacement, in f32 (the 2-bit
//     views both sides kept went with the lost shard); so is one whose answer was lost
//     with a bulk lane that closed, once, before the shard is known to be gone;
//   - a push that was in flight is answered with no versions: the lost shard took it
//     with it, as the restore would have dropped it anyway (it came after the newest
//     checkpoint), and a sync round goes on from the restored version without it;
//   - a collective piece in flight fails with shard_lost: the other members' pieces were
//     lost too, and one member cannot give them again; the caller calls it again.
// Once the shard is back at its new address (or handle, in one process), the member
// watches it, notes the step its keys went back to (kv.restored_step), warns once saying
// so, and sends what it held. Its tensors to that shard then go in the messages: the
// lost shard's bulk lane closed and is not asked for again. If the job ends first (the
// replacement never came, or another shard was lost), every held call fails with the
// job's error.

bool replaces_shards(member_pointer self) { return replaces_kv_shards(self->state.place.job); }

std::function<void(or_fault<kv_push_ack>)> lost_with_the_shard(member_pointer self, std::uint32_t s,
                                                               std::function<void(or_fault<kv_push_ack>)> done) {
  return [self, s, done = std::move(done)](or_fault<kv_push_ack> r) {
    const auto& st = self->state;
    const auto* f = std::get_if<fault>(&r);
    if (f && f->code == errc::shard_lost && !st.lost && s < st.away.size() && st.away[s]) return done(kv_push_ack{});
    done(std::move(r));
  };
}

std::function<void(or_fault<kv_pull_reply>)> asked_again(member_pointer self, const member_call_pull& c) {
  auto again = std::make_shared<member_call_pull>(c);  // a pull's message is small: part ids and rows
  again->msg.full = true;
  again->msg.lane_reply = 0;
  auto done = c.done;
  return [self, again, done](or_fault<kv_pull_reply> r) {
    const auto& st = self->state;
    const auto* f = std::get_if<fault>(&r);
    const std::uint32_t s = again->shard;
    const bool away = s < st.away.size() && st.away[s];
    if (!f || f->code != errc::shard_lost || st.lost || (!away && again->asked_again > 0)) return done(std::move(r));
    member_call_pull c = *again;
    if (!away) ++c.asked_again;  // a lane lost before its shard is known to be gone: once
    pull(self, c);
  };
}

void shard_down(member_pointer self, std::uint32_t s, const caf::error& reason) {
  auto& st = self->state;
  if (st.lost) return;  // the job ended: its shards stop with it
  if (!replaces_shards(self))
    return lose(self, {errc::shard_lost, "shard " + std::to_string(s) + " was lost (" + describe(reason) +
                                             "); its parameters are gone, so the job cannot go on"});
  // A shard the coordinator stopped says why (the job ended or failed); a lost one does not.
  if (auto f = as_fault(reason)) return lose(self, *f);
  st.away[s] = true;
  spdlog::info("troupe.kv: shard {} was lost ({}); calls to it wait while the job puts a server in its place", s,
               describe(reason));
  const fault f{errc::shard_lost, "shard " + std::to_string(s) + " was lost (" + describe(reason) +
                                      ") during this call; the job puts a server in its place with its keys from "
                                      "the newest checkpoint: call it again"};
  std::vector<std::function<void(const fault&)>> failed;
  for (auto it = st.pending.begin(); it != st.pending.end();)
    if (it->second.shard == s) {
      failed.push_back(std::move(it->second.fail));
      it = st.pending.erase(it);
    } else {
      ++it;
    }
  for (auto& fail : failed) fail(f);
  close_bells(self, s, "the shard was lost");  // their calls failed above
}

namespace {

void rewire(member_pointer self, std::uint32_t s, shard_actor shard, std::int64_t step) {
  auto& st = self->state;
  if (st.lost) return;
  st.shards[s] = std::move(shard);
  self->monitor(st.shards[s]);
  st.away[s] = false;
  if (st.opts.restores) st.opts.restores->note(step);
  spdlog::warn(
      "troupe.kv: shard {} was lost and is back with its keys from checkpoint {}: their values went back to step {} "
      "(kv.restored_step), and the loop goes on",
      s, step, step);
  for (auto& call : std::exchange(st.held[s], {})) call.send();
}

}  // namespace

void shard_back(member_pointer self, const kv_shard_back& b) {
  auto& st = self->state;
  const auto& sender = self->current_sender();
  if (!sender || sender->address() != st.opts.coordinator.address()) return;  // only the coordinator says so
  if (st.lost || b.shard >= st.away.size() || !st.away[b.shard]) return;
  if (!b.handle.empty()) return rewire(self, b.shard, b.handle.front(), b.step);
  if (!st.opts.connector)
    return lose(self, {errc::bad_job, "shard " + std::to_string(b.shard) + " is back on another node, but this "
                                      "store has no network"});
  const auto deadline = std::chrono::steady_clock::now() + st.opts.connect_timeout;
  connect_shard(self, b.shard, b.host, b.port, deadline, std::chrono::milliseconds(50),
                [self, s = b.shard, step = b.step](or_fault<shard_actor> r) {
                  if (auto* f = std::get_if<fault>(&r)) return lose(self, *f);
                  rewire(self, s, std::get<shard_actor>(std::move(r)), step);
                });
}

// A node busy with other handshakes (every member connects at once) may refuse or close
// one: each connection is retried with a growing pause until `deadline`, as a stage's is.
void connect_peer(member_pointer self, std::string peer, const char* role, std::string host, std::uint16_t port,
                  std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds pause,
                  std::function<void(or_fault<caf::strong_actor_ptr>)> then) {
  using steady = std::chrono::steady_clock;
  auto& st = self->state;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
  if (st.opts.expect_peer) st.opts.expect_peer(host, port, role);
  const errc lost = std::string_view(role) == "server" ? errc::shard_lost : errc::stage_lost;
  self->request(*st.opts.connector, std::max(left, std::chrono::milliseconds(1)), caf::connect_atom::value, host, port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (!ptr)
              return then(fault{lost, "nothing is published at " + host + ":" + std::to_string(port) + " where " +
                                          peer + " should be"});
            then(std::move(ptr));
          },
          [=](caf::error& e) {
            if (steady::now() + pause < deadline) {
              spdlog::warn("troupe.kv: {} at {}:{} not reachable yet ({}); retrying", peer, host, port, describe(e));
              self->delayed_send(self, pause, member_call_retry{[=] {
                                   connect_peer(self, peer, role, host, port, deadline, pause * 2, then);
                                 }});
              return;
            }
            then(fault{lost, "cannot reach " + peer + " at " + host + ":" + std::to_string(port) + ": " + describe(e)});
          });
}

void connect_shard(member_pointer self, std::uint32_t i, std::string host, std::uint16_t port,
                   std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds pause,
                   std::function<void(or_fault<shard_actor>)> then) {
  connect_peer(self, "shard " + std::to_string(i), "server", std::move(host), port, deadline, pause,
               [then = std::move(then)](or_fault<caf::strong_actor_ptr> r) {
                 if (auto* f = std::get_if<fault>(&r)) return then(*f);
                 then(caf::actor_cast<shard_actor>(std::get<caf::strong_actor_ptr>(std::move(r))));
               });
}

}  // namespace troupe::kv::member_shell
