// member_lanes: a member's bulk lanes to its shards as its actor drives them (Note [Bulk
// lanes] in transport/lane.hpp), one implementation for every kind of member: the training
// stage (actors/stage_lane.cpp) and the key-value client (client/kv_member.cpp). It routes
// each call (route): asks a shard for a lane when a call is first large enough, moves a
// push's (or a collective piece's) tensor onto an open lane, names the ticket a pull's (or
// a collective's) answer comes under. It meets each answer with its payload, and fails the
// answers still waiting when a lane closes. Which shards may have a lane at all (another
// host, not reached through shared memory) is the caller's to say.
// Not thread-safe: the member's actor owns it, in its state, for as long as it lives (the
// answers to its lane requests find it there).
#pragma once

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "actors/lane_mail.hpp"
#include "actors/protocol.hpp"
#include "base/errc.hpp"
#include "transport/lane_book.hpp"

namespace troupe::lane {

// Reply: a pull's answer; Values: its tensor, which a lane payload fills.
template <class Reply, tensor Reply::*Values>
class member_lanes {
 public:
  // The answer, complete with its values, or why it will not be.
  using done_fn = std::function<void(std::variant<Reply, fault>)>;

  // `who`: how the member names itself in the log.
  member_lanes(std::shared_ptr<member_end> end, std::size_t shards, std::string who)
      : end_(std::move(end)), book_(shards), who_(std::move(who)) {}

  // Once: the lane end reports to `owner` (lane_payload, lane_event), which passes them on.
  void start(caf::actor_addr owner) { end_->start(member_lane_handlers(std::move(owner))); }

  // Asks shard s (the actor `shard`, at `host`) for a lane on behalf of member `rank` when
  // a call of `bytes` would use one and none was asked for yet.
  template <class Self>
  void maybe_ask(Self* self, const shard_actor& shard, std::uint32_t s, std::uint32_t rank, const std::string& host,
                 std::chrono::milliseconds timeout, std::size_t bytes) {
    if (!book_.should_ask(s, bytes)) return;
    self->request(shard, timeout, lane_open_atom::value, rank)
        .then(
            [this, s, host](const lane_offer& offer) {
              book_.offered(s);
              end_->open(s, host, offer);
            },
            [this, s](caf::error& e) {
              book_.refused(s);
              spdlog::info("{}: no bulk lane to shard {} ({}); its tensors go in the messages", who_, s, troupe::describe(e));
            });
  }

  // Routes `msg` (a push, a pull or a collective piece) of member `rank` to shard s, which
  // the caller says may have a lane, in one step for every kind of call: asks for the
  // lane when the call's tensor or its answer (`answer_bytes`) is large enough, moves the
  // tensor onto the open lane unless a slot holds it, and names the ticket the answer
  // comes under unless the call offered a reply slot. Returns that ticket (also in
  // msg.lane_reply); 0: the answer comes in the message.
  template <class Self, class Msg>
  std::uint64_t route(Self* self, const shard_actor& shard, std::uint32_t s, std::uint32_t rank,
                      const std::string& host, std::chrono::milliseconds timeout, Msg& msg, std::size_t answer_bytes) {
    std::size_t bytes = answer_bytes;
    if constexpr (requires { msg.data; }) bytes = std::max(bytes, msg.data.nbytes());
    maybe_ask(self, shard, s, rank, host, timeout, bytes);
    if constexpr (requires { msg.shared; msg.lane; })
      if (msg.shared.empty())
        if (auto d = send(s, msg.data)) msg.lane = std::move(*d);
    if constexpr (requires { msg.reply_to; msg.lane_reply; }) {
      if (msg.reply_to.empty() && answer_bytes > 0) msg.lane_reply = reply_ticket(s, answer_bytes);
      return msg.lane_reply;
    }
    return 0;
  }

  // Moves `payload` onto the lane to s when it is open and the payload large enough: the
  // descriptor for the message then; nullopt, with the payload untouched, otherwise.
  std::optional<lane_tensor> send(std::uint32_t s, tensor& payload) {
    if (payload.empty() || !book_.carries(s, payload.nbytes())) return std::nullopt;
    const std::uint64_t ticket = book_.next_ticket();
    lane_tensor d = describe(ticket, payload);
    if (!end_->send(s, ticket, std::move(payload))) return std::nullopt;
    return d;
  }

  // The ticket for a pull of `bytes` from s to be answered on the lane; 0: in the message.
  std::uint64_t reply_ticket(std::uint32_t s, std::size_t bytes) {
    return book_.carries(s, bytes) ? book_.next_ticket() : 0;
  }

  // The reply to a pull that asked under `ticket` (0: it did not): to `done` now when it
  // carries its values (or names a payload it may not), or once its payload comes.
  void on_reply(std::uint32_t s, std::uint64_t ticket, Reply r, done_fn done) {
    on_reply_of<Reply, Values>(s, ticket, std::move(r), std::move(done));
  }
  // The same for a reply of another kind R whose values are at V (a collective's answer),
  // under the same tickets and lanes.
  template <class R, tensor R::*V>
  void on_reply_of(std::uint32_t s, std::uint64_t ticket, R r, std::function<void(std::variant<R, fault>)> done) {
    if (r.lane.empty()) return done(std::move(r));  // answered in the message: no payload comes
    if (ticket == 0 || r.lane.ticket != ticket) return done(unasked(s));
    const lane_tensor d = r.lane;
    auto fill = [s, r = std::move(r), done](std::variant<tensor, fault> got) mutable {
      if (auto* f = std::get_if<fault>(&got)) return done(std::move(*f));
      auto values = shaped(std::move(std::get<tensor>(got)), r.lane);
      if (!values)
        return done(fault{errc::malformed, "shard " + std::to_string(s) + "'s answer on the bulk lane: " +
                                               values.error().message});
      r.*V = std::move(*values);
      r.lane = {};
      done(std::move(r));
    };
    waiting w{s, std::move(fill)};
    if (auto t = book_.replies.wait({s, d.ticket}, std::move(w))) w.fill(std::move(*t));
  }

  // Why an answer of shard s that names a lane payload nobody asked for is refused.
  static fault unasked(std::uint32_t s) {
    return {errc::malformed, "shard " + std::to_string(s) +
                                 " named a lane payload this member did not ask for; run one troupe build on every node"};
  }

  // The pull under `ticket` will not be answered (it timed out): its payload is dropped.
  void abandon(std::uint32_t s, std::uint64_t ticket) {
    if (ticket != 0) book_.replies.abandon({s, ticket});
  }

  void on_payload(lane_payload& p) {
    if (auto met = book_.replies.payload({p.peer, p.ticket}, std::move(p.data)))
      met->waiter.fill(std::move(met->payload));
  }

  // The lane opened, or closed (or did not open): from then on its tensors go in the
  // messages, and the answers that waited for its payloads fail as from a lost shard.
  void on_event(const lane_event& e) {
    if (e.opened) {
      book_.opened(e.peer);
      spdlog::info("{}: exchanges large tensors with shard {} over a bulk lane", who_, e.peer);
      return;
    }
    spdlog::warn("{}: the bulk lane to shard {} closed ({}); its tensors go in the messages", who_, e.peer, e.why);
    fail(e.peer, {errc::shard_lost, "the bulk lane to shard " + std::to_string(e.peer) + " closed: " + e.why});
  }

  // Fails the answers that wait for payloads from every shard with f.
  void fail_all(const fault& f) {
    for (std::uint32_t s = 0; s < shards(); ++s) fail(s, f);
  }

  std::uint32_t shards() const { return static_cast<std::uint32_t>(book_.size()); }

 private:
  // An answer that waits for its payload: what completes it with the payload or a fault.
  struct waiting {
    std::uint32_t shard;
    std::function<void(std::variant<tensor, fault>)> fill;
  };

  void fail(std::uint32_t s, const fault& f) {
    for (auto& w : book_.closed(s)) w.fill(f);
  }

  std::shared_ptr<member_end> end_;
  member_book<waiting> book_;
  std::string who_;
};

// Every member's lanes to its shards: a pull's answer is a kv_pull_reply whatever the job.
using lanes_to_shards = member_lanes<kv_pull_reply, &kv_pull_reply::data>;

}  // namespace troupe::lane
