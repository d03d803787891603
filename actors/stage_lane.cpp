// stage_lane: a training member's bulk lanes to the shards it reaches over the network
// (Note [Bulk lanes] in core/lane.hpp): asking a shard for a lane when its slice is large
// enough, the tickets of pulls and pushes that go on it, and replies that wait for their
// payloads. Shards in this process or reached through shared memory never get one.
#include <spdlog/spdlog.h>

#include "actors/lane_mail.hpp"
#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

// The book, made (and the lane end told where to report) at the first use; nullptr when
// this node has no lane end.
lane::member_book<params_reply>* book_of(stage_pointer self) {
  auto& st = self->state;
  if (!st.opts.lanes) return nullptr;
  if (!st.lanes) {
    st.lanes.emplace(st.shards.size());
    st.opts.lanes->start(member_lane_handlers(caf::actor_cast<caf::actor_addr>(self)));
  }
  return &*st.lanes;
}

// Whether shard s is on another node and not reached through shared memory.
bool over_the_network(stage_pointer self, std::uint32_t s) {
  auto& st = self->state;
  if (s >= st.shards.size() || !st.shards[s] || st.shards[s].node() == self->node()) return false;
  return !st.fast.pool || st.fast.pool->declined(s);
}

void ask_for_lane(stage_pointer self, std::uint32_t s) {
  auto& st = self->state;
  const auto timeout = std::chrono::milliseconds(st.core->place().job.request_timeout_ms);
  self->request(st.shards[s], timeout, lane_open_atom::value, st.core->place().rank)
      .then(
          [=](const lane_offer& offer) {
            auto& st = self->state;
            st.lanes->offered(s);
            st.opts.lanes->open(s, st.core->place().shard_hosts.at(s), offer);
          },
          [=](caf::error& e) {
            self->state.lanes->refused(s);
            spdlog::info("{}: no bulk lane to shard {} ({}); its tensors go in the messages", who(self), s,
                         describe(e));
          });
}

// The pull's answer, complete with its payload, to the core.
void finish_pull(stage_pointer self, std::uint32_t s, params_reply p, tensor payload) {
  auto values = lane::shaped(std::move(payload), p.lane);
  if (!values) {
    const std::string why = "shard " + std::to_string(s) + "'s answer on the bulk lane: " + values.error().message;
    drive(self, [&](member_core& c) { return c.on_pull_failed(s, why); });
    return;
  }
  p.params = std::move(*values);
  p.lane = {};
  drive(self, [&](member_core& c) { return c.on_params(s, std::move(p)); });
}

}  // namespace

std::uint64_t lane_reply_ticket(stage_pointer self, std::uint32_t s, const pull_request& r) {
  auto* book = book_of(self);
  if (!book || !over_the_network(self, s) || self->state.core->place().shard_hosts.size() <= s) return 0;
  const auto numel = r.piece_numel > 0 ? r.piece_numel : self->state.core->slice_numel(s);
  const auto bytes = static_cast<std::size_t>(numel) * sizeof(float);
  if (book->should_ask(s, bytes)) ask_for_lane(self, s);
  return book->carries(s, bytes) ? book->next_ticket() : 0;
}

void push_on_lane(stage_pointer self, std::uint32_t s, push_grads& g) {
  auto* book = book_of(self);
  if (!book || g.grad.empty() || !g.shared.empty() || !book->carries(s, g.grad.nbytes())) return;
  const std::uint64_t ticket = book->next_ticket();
  lane_tensor d = lane::describe(ticket, g.grad);
  if (self->state.opts.lanes->send(s, ticket, std::move(g.grad))) g.lane = std::move(d);
}

void on_lane_reply(stage_pointer self, std::uint32_t s, std::uint64_t asked, params_reply p) {
  if (p.lane.empty()) {  // answered in the message after all (the shard's lane closed): no payload comes
    drive(self, [&](member_core& c) { return c.on_params(s, std::move(p)); });
    return;
  }
  if (p.lane.ticket != asked || !self->state.lanes) {
    const std::string why = "shard " + std::to_string(s) + " named a lane payload this member did not ask for; run "
                            "one troupe build on every node";
    drive(self, [&](member_core& c) { return c.on_pull_failed(s, why); });
    return;
  }
  if (auto t = self->state.lanes->replies.wait({s, asked}, std::move(p))) finish_pull(self, s, std::move(p), *t);
}

void abandon_lane_reply(stage_pointer self, std::uint32_t s, std::uint64_t ticket) {
  if (self->state.lanes) self->state.lanes->replies.abandon({s, ticket});
}

void on_lane_payload(stage_pointer self, lane_payload& p) {
  if (!self->state.lanes) return;
  if (auto met = self->state.lanes->replies.payload({p.peer, p.ticket}, std::move(p.data)))
    finish_pull(self, p.peer, std::move(met->waiter), std::move(met->payload));
}

void on_lane_event(stage_pointer self, const lane_event& e) {
  auto& st = self->state;
  if (!st.lanes) return;
  if (e.opened) {
    st.lanes->opened(e.peer);
    spdlog::info("{}: exchanges large tensors with shard {} over a bulk lane", who(self), e.peer);
    return;
  }
  spdlog::warn("{}: the bulk lane to shard {} closed ({}); its tensors go in the messages", who(self), e.peer, e.why);
  const std::string why = "the bulk lane to shard " + std::to_string(e.peer) + " closed: " + e.why;
  for (auto& waiting : st.lanes->closed(e.peer)) {
    (void)waiting;
    drive(self, [&](member_core& c) { return c.on_pull_failed(e.peer, why); });
    if (st.core->phase() == member_phase::stopped) return;
  }
}

}  // namespace troupe::stage_shell
