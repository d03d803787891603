// kv_member: join, wiring to the shards, requests with deadlines, step reports, and
// failing fast when the coordinator or a shard goes away.
#include "client/kv_member.hpp"

#include <spdlog/spdlog.h>

#include "client/kv_member_state.hpp"

namespace troupe::kv::member_shell {

fault to_fault(const caf::error& e, std::chrono::milliseconds timeout) {
  if (auto f = as_fault(e)) return *f;
  if (e == caf::sec::request_timeout)
    return {errc::timed_out, "no answer within " + std::to_string(timeout.count()) + " ms (--request-timeout)"};
  return {errc::shard_lost, describe(e)};
}

void lose(member_pointer self, fault f) {
  auto& st = self->state;
  if (st.lost) return;
  st.lost = f;
  if (f.code != errc::closed) spdlog::error("troupe.kv: {}", to_string(f));
  for (auto& [id, call] : std::exchange(st.pending, {})) call.fail(f);
  for (auto& [s, calls] : std::exchange(st.held, {}))
    for (auto& call : calls) call.fail(f);
  close_bells(self, std::nullopt, to_string(f));  // their calls failed above
  if (st.lanes) st.lanes->fail_all(f);
  break_ring(self, f);
}

namespace {

// Asks shard s with `msg`, whose answer (an R, its values at V) comes on the bulk lane
// under `ticket` (0: in the message; route_on_lane named it in msg.lane_reply), and calls
// done once with the complete answer.
template <class R, tensor R::*V, class Atom, class Msg>
void ask_answered_on_lane(member_pointer self, std::uint32_t s, std::uint64_t ticket, std::chrono::milliseconds timeout,
                          std::function<void(or_fault<R>)> done, Atom atom, Msg msg) {
  if (ticket == 0) return ask_to<R>(self, s, self->state.shards.at(s), timeout, std::move(done), atom, std::move(msg));
  auto complete = [self, s, ticket, done = std::move(done)](or_fault<R> r) {
    auto* reply = std::get_if<R>(&r);
    if (!reply) {  // no payload comes; one still on its way after a timeout is dropped
      if (std::get<fault>(r).code == errc::timed_out) self->state.lanes->abandon(s, ticket);
      return done(std::move(r));
    }
    self->state.lanes->template on_reply_of<R, V>(s, ticket, std::move(*reply), done);
  };
  ask_to<R>(self, s, self->state.shards.at(s), timeout, std::move(complete), atom, std::move(msg));
}

// ok_atom answers become "no fault".
auto no_fault(std::function<void(std::optional<fault>)> done) {
  return [done](std::variant<caf::ok_atom, fault> r) {
    if (auto* f = std::get_if<fault>(&r))
      done(*f);
    else
      done(std::nullopt);
  };
}

// The bulk lanes (Note [Bulk lanes]): the book, and where the lane end reports.
void start_lanes(member_pointer self) {
  auto& st = self->state;
  if (!st.opts.lanes) return;
  st.lanes.emplace(st.opts.lanes, st.shards.size(), "troupe.kv");
  st.lanes->start(caf::actor_cast<caf::actor_addr>(self));
}

void joined(member_pointer self, const std::function<void(or_fault<member_assignment>)>& done) {
  auto& st = self->state;
  self->monitor(st.opts.coordinator);
  for (auto& s : st.shards) self->monitor(s);
  st.away.assign(st.shards.size(), false);
  start_lanes(self);
  done(st.place);
}

// Whether shard s is on another node (a lane may go there).
bool remote(member_pointer self, std::uint32_t s) {
  auto& st = self->state;
  return st.lanes && s < st.shards.size() && st.shards[s] && st.shards[s].node() != self->node() &&
         s < st.place.shard_hosts.size();
}

// Routes a call to shard s over its bulk lane when `lane` (the store says the shard is
// reached over the network) and it is on another node (member_lanes::route); the ticket
// its answer comes under (0: in the message).
template <class Msg>
std::uint64_t route_on_lane(member_pointer self, std::uint32_t s, bool lane, Msg& msg, std::size_t answer_bytes) {
  auto& st = self->state;
  if (!lane || !remote(self, s)) return 0;
  return st.lanes->route(self, st.shards[s], s, st.place.rank, st.place.shard_hosts[s], request_timeout(self), msg,
                         answer_bytes);
}

// Connects to shard i and the ones after it by address, then finishes the join.
void connect_shards(member_pointer self, std::size_t i, std::chrono::steady_clock::time_point deadline,
                    std::function<void(or_fault<member_assignment>)> done) {
  auto& st = self->state;
  if (i == st.place.shard_hosts.size()) return joined(self, done);
  connect_shard(self, static_cast<std::uint32_t>(i), st.place.shard_hosts[i], st.place.shard_ports[i], deadline,
                std::chrono::milliseconds(50), [=](or_fault<shard_actor> r) {
                  if (auto* f = std::get_if<fault>(&r)) return done(*f);
                  self->state.shards.push_back(std::get<shard_actor>(std::move(r)));
                  connect_shards(self, i + 1, deadline, done);
                });
}

// Fails the store's calls when the coordinator or a shard goes away, or the job ends.
void watch_the_job(member_pointer self) {
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source == st.opts.coordinator.address())
      return lose(self, {errc::shard_lost, "the job's coordinator went away (" + describe(dm.reason) + ")"});
    if (ring_neighbour_down(self, dm)) return;
    for (std::uint32_t s = 0; s < st.shards.size(); ++s)
      if (dm.source == st.shards[s].address()) return shard_down(self, s, dm.reason);
  });
  // The coordinator stops its members when the job ends or fails: this actor stays, so
  // the store's calls fail with the reason instead of going unanswered.
  self->set_exit_handler([=](caf::exit_msg& em) {
    if (em.source == self->state.opts.coordinator.address()) {
      auto f = as_fault(em.reason);
      lose(self, f ? *f : fault{errc::shard_lost, "the job ended (" + describe(em.reason) + ")"});
      return;
    }
    self->quit(em.reason);
  });
}

void join(member_pointer self, member_call_join& c) {
  auto& st = self->state;
  auto answer = c.done;
  self->request(st.opts.coordinator, st.opts.connect_timeout, join_atom::value,
                worker_join{c.job_id, c.host, c.port, {}, c.proof, st.opts.wanted_rank})
      .then(
          [=](worker_welcome& w) {
            // Joined once the shards are reached and the ring (if any) is wired.
            self->state.place = std::move(w.place);
            auto welcome = std::make_shared<worker_welcome>(std::move(w));  // its place moved out
            auto done = [self, welcome, answer](or_fault<member_assignment> r) {
              if (std::holds_alternative<fault>(r)) return answer(std::move(r));
              wire_kv_ring(self, *welcome, [self, answer](std::optional<fault> f) {
                if (f) return answer(*f);
                answer(self->state.place);
              });
            };
            if (!welcome->shards.empty() || self->state.place.shard_hosts.empty()) {
              self->state.shards = std::move(welcome->shards);
              return joined(self, done);
            }
            if (!self->state.opts.connector)
              return done(fault{errc::bad_job, "the job's shards are on other nodes but this store has no network"});
            connect_shards(self, 0, std::chrono::steady_clock::now() + self->state.opts.connect_timeout, done);
          },
          [=](caf::error& e) {
            answer(fault{as_fault(e) ? as_fault(e)->code : errc::stalled,
                       "the coordinator refused or did not answer the join: " + describe(e) +
                           (troupe_code(e) == errc::not_member ? " (does this process hold the job's secret?)" : "")});
          });
}

void push(member_pointer self, member_call_push& c) {
  auto& st = self->state;
  if (held_while_away(self, c, push)) return;  // Note [A shard away]
  if (replaces_shards(self)) c.done = lost_with_the_shard(self, c.shard, std::move(c.done));
  c.msg.worker = st.place.rank;
  c.msg.shard = c.shard;
  if (ring_push(self, c)) return;
  route_on_lane(self, c.shard, c.lane, c.msg, 0);
  ask_to<kv_push_ack>(self, c.shard, st.shards.at(c.shard), request_timeout(self), c.done, push_atom::value,
                      std::move(c.msg));
}

}  // namespace

void pull(member_pointer self, member_call_pull& c) {
  auto& st = self->state;
  if (held_while_away(self, c, pull)) return;
  if (replaces_shards(self)) c.done = asked_again(self, c);
  c.msg.worker = st.place.rank;
  c.msg.shard = c.shard;
  if (ring_pull(self, c)) return;
  const std::uint32_t s = c.shard;
  const std::uint64_t ticket = route_on_lane(self, s, c.lane, c.msg, c.bytes);
  ask_answered_on_lane<kv_pull_reply, &kv_pull_reply::data>(self, s, ticket, request_timeout(self), c.done,
                                                           pull_atom::value, std::move(c.msg));
}

namespace {

void collective(member_pointer self, member_call_collective& c) {
  auto& st = self->state;
  if (c.shard >= st.shards.size())
    return c.done(fault{errc::bad_shard, "the job has " + std::to_string(st.shards.size()) + " shards, not " +
                                             std::to_string(c.shard + 1)});
  if (held_while_away(self, c, collective)) return;
  c.msg.worker = st.place.rank;
  c.msg.shard = c.shard;
  const std::uint32_t s = c.shard;
  const std::uint64_t ticket = route_on_lane(self, s, c.lane, c.msg, c.bytes);
  ask_answered_on_lane<kv_collective_reply, &kv_collective_reply::data>(self, s, ticket, c.timeout, c.done,
                                                                       kv_coll_atom::value, std::move(c.msg));
}

void report_step(member_pointer self, const member_call_step& c) {
  auto& st = self->state;
  step_report r;
  r.rank = st.place.rank;
  r.clock = c.number;
  r.busy_seconds = c.busy_seconds;
  if (!st.lost) self->send(st.opts.coordinator, progress_atom::value, r);
}

// Closes the store once the ring pieces it passed on have left this process (Note [A ring
// of users' loops]), or `deadline` has passed; looks again every millisecond until then.
void leave_once_flushed(member_pointer self, std::shared_ptr<member_call_close> c,
                        std::chrono::steady_clock::time_point deadline) {
  if (!ring_flushed(self) && std::chrono::steady_clock::now() < deadline) {
    self->delayed_send(self, std::chrono::milliseconds(1),
                       member_call_retry{[self, c, deadline] { leave_once_flushed(self, c, deadline); }});
    return;
  }
  say_goodbye_to_ring(self, [self, c] {  // Note [A ring neighbour that left]
    auto& st = self->state;
    if (!st.lost) self->send(st.opts.coordinator, done_atom::value, worker_done{st.place.rank, 0, 0, 0, 0});
    lose(self, {errc::closed, "the store was closed"});
    c->done();
    self->quit();
  });
}

void leave(member_pointer self, member_call_close& c) {
  leave_once_flushed(self, std::make_shared<member_call_close>(std::move(c)),
                     std::chrono::steady_clock::now() + request_timeout(self));
}

caf::behavior kv_member(member_pointer self, member_options opts) {
  self->state.opts = std::move(opts);
  watch_the_job(self);
  return {
      [=](member_call_join& c) { join(self, c); },
      [=](member_call_init& c) {
        c.msg.worker = self->state.place.rank;
        ask<kv_key_layout>(self, self->state.opts.coordinator, request_timeout(self), c.done, kv_init_atom::value,
                           std::move(c.msg));
      },
      [=](member_call_lookup& c) {
        c.msg.worker = self->state.place.rank;
        ask<kv_key_layout>(self, self->state.opts.coordinator, request_timeout(self), c.done, kv_lookup_atom::value,
                           std::move(c.msg));
      },
      [=](member_call_push& c) { push(self, c); },
      [=](member_call_pull& c) { pull(self, c); },
      [=](lane_payload& p) {
        if (p.side != lane_side::shards) return on_ring_lane_payload(self, p);
        if (self->state.lanes) self->state.lanes->on_payload(p);
      },
      [=](const lane_event& e) {
        if (e.side != lane_side::shards) return on_ring_lane_event(self, e);
        if (self->state.lanes) self->state.lanes->on_event(e);
      },
      [=](member_call_optimizer& c) {
        c.msg.worker = self->state.place.rank;
        ask<caf::ok_atom>(self, self->state.opts.coordinator, request_timeout(self), no_fault(c.done),
                          kv_opt_atom::value, std::move(c.msg));
      },
      [=](member_call_barrier& c) {
        ask<caf::ok_atom>(self, self->state.opts.coordinator, c.timeout, no_fault(c.done), kv_barrier_atom::value,
                          kv_barrier{self->state.place.rank});
      },
      [=](member_call_collective& c) { collective(self, c); },
      [=](member_call_retry& r) { r.again(); },
      [=](bells_answered) { on_bells_answered(self); },
      [=](bell_deadline) { on_bell_deadline(self); },
      [=](const member_call_step& c) { report_step(self, c); },
      [=](member_call_close& c) { leave(self, c); },
      [=](kv_back_atom, const kv_shard_back& b) { shard_back(self, b); },
      [=](member_call_ring& c) { take_ring_call(self, c); },
      [=](const member_ring_overdue& o) { on_ring_overdue(self, o); },
      [=](ring_atom, const stage_hello& h) { on_ring_hello(self, h); },
      [=](ring_atom, ring_piece& p) { on_ring_piece(self, p); },
      [=](ring_atom, const ring_mailbox_offer& m) { on_ring_mailbox(self, m); },
      [=](ring_atom, lane_open_atom) -> caf::result<lane_offer> { return on_ring_lane_ask(self); },
      [=](ring_atom, done_atom) { return on_ring_goodbye(self); },
  };
}

}  // namespace

}  // namespace troupe::kv::member_shell

namespace troupe::kv {

caf::actor spawn_kv_member(caf::actor_system& sys, member_options opts) {
  return sys.spawn(member_shell::kv_member, std::move(opts));
}

}  // namespace troupe::kv
