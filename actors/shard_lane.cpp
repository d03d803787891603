// shard_lane: a shard server's side of its members' bulk lanes (Note [Bulk lanes] in
// transport/lane.hpp): offers, payloads that come before or after their messages, each
// member's calls kept in order while one of its pushes waits for its payload, answers sent
// on the lane, and what happens when a lane closes or a payload is overdue.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::shard_shell {

namespace {

// Serves member rank's waiting calls in order until one waits for a payload still on
// its way (whose deadline is then set) or none is left. A call whose payload will not
// come (its lane closed) is answered by its own attempt with the reason.
void drain(shard_pointer self, std::uint32_t rank) {
  auto& ln = *self->state.lanes;
  auto it = ln.backlog.find(rank);
  if (it == ln.backlog.end()) return;
  auto& q = it->second;
  while (!q.calls.empty()) {
    if (!q.calls.front().attempt()) {
      const std::uint64_t ticket = q.calls.front().ticket;
      if (q.overdue_set != ticket) {
        q.overdue_set = ticket;
        self->delayed_send(self, self->state.request_timeout, lane_overdue{rank, ticket});
      }
      return;
    }
    q.calls.pop_front();
  }
  ln.backlog.erase(it);
}

// Fails every call rank left waiting with e, in order.
void fail_backlog(shard_pointer self, std::uint32_t rank, const caf::error& e) {
  auto& ln = *self->state.lanes;
  auto it = ln.backlog.find(rank);
  if (it == ln.backlog.end()) return;
  auto calls = std::move(it->second.calls);
  ln.backlog.erase(it);
  for (auto& c : calls) {
    if (c.ticket != 0) ln.payloads.abandon({rank, c.ticket});
    c.fail(e);
  }
}

}  // namespace

void in_order(shard_pointer self, std::uint32_t rank, waiting_call call) {
  auto& st = self->state;
  if (!st.lanes) {
    call.attempt();  // nothing ever waits for a payload
    return;
  }
  auto& q = st.lanes->backlog[rank];
  q.calls.push_back(std::move(call));
  if (q.calls.size() == 1) drain(self, rank);
}

claimed claim_payload(shard_pointer self, std::uint32_t rank, const lane_tensor& d) {
  auto& st = self->state;
  if (!st.lanes) return {std::nullopt, "a payload on a bulk lane, but this shard has none"};
  if (auto a = st.lanes->payloads.take({rank, d.ticket})) {
    auto shaped = lane::shaped(std::move(a->data), d);
    if (!shaped) return {std::nullopt, "its lane payload: " + shaped.error().message};
    if (st.m) st.m->bytes_received->Increment(static_cast<double>(shaped->nbytes()));
    return {std::move(*shaped), {}, a->finite};
  }
  if (st.lanes->overdue.erase({rank, d.ticket}))
    return {std::nullopt, "its payload did not come on the bulk lane within the request timeout (" +
                              std::to_string(st.request_timeout.count()) + " ms)"};
  if (st.lanes->closed.contains(rank)) {
    st.lanes->payloads.abandon({rank, d.ticket});
    return {std::nullopt, "its payload's bulk lane closed before the payload came"};
  }
  return {};
}

std::optional<lane_tensor> answer_on_lane(shard_pointer self, std::uint32_t rank, std::uint64_t ticket, tensor& t) {
  auto& st = self->state;
  if (ticket == 0 || !st.lanes) return std::nullopt;  // the member asks only for what is worth a lane
  lane_tensor d = lane::describe(ticket, t);
  if (!st.lanes->end->send(rank, ticket, std::move(t))) return std::nullopt;
  return d;
}

void on_lane_payload(shard_pointer self, lane_payload& p) {
  auto& st = self->state;
  if (!st.lanes) return;
  auto& ln = *st.lanes;
  ln.payloads.payload({p.peer, p.ticket}, {std::move(p.data), p.finite});
  if (ln.payloads.kept(p.peer) > lane::max_kept) {
    const std::string why = "it sent more than " + std::to_string(lane::max_kept) + " payloads no push named";
    if (monitoring::count_refusal(monitoring::refusal::lane_refused, "worker " + std::to_string(p.peer)))
      spdlog::warn("shard {}: closes the bulk lane of worker {}: {}", st.index, p.peer, why);
    ln.end->drop(p.peer, why);
    return on_lane_closed(self, p.peer, why);
  }
  auto it = ln.backlog.find(p.peer);
  if (it != ln.backlog.end() && !it->second.calls.empty() && it->second.calls.front().ticket == p.ticket)
    drain(self, p.peer);
}

void on_lane_closed(shard_pointer self, std::uint32_t rank, const std::string& why) {
  auto& st = self->state;
  if (!st.lanes) return;
  spdlog::info("shard {}: the bulk lane of worker {} closed ({}); its tensors go in the messages", st.index, rank, why);
  st.lanes->closed.insert(rank);
  drain(self, rank);  // what waits for a payload is answered: it will not come
  st.lanes->payloads.close(rank);
}

void on_lane_overdue(shard_pointer self, std::uint32_t rank, std::uint64_t ticket) {
  auto& st = self->state;
  if (!st.lanes) return;
  auto it = st.lanes->backlog.find(rank);
  if (it == st.lanes->backlog.end() || it->second.calls.empty() || it->second.calls.front().ticket != ticket) return;
  // The push is refused through its own attempt, so the core counts it as any refused push.
  st.lanes->payloads.abandon({rank, ticket});
  st.lanes->overdue.insert({rank, ticket});
  drain(self, rank);
}

caf::result<lane_offer> offer_lane(shard_pointer self, std::uint32_t rank) {
  auto& st = self->state;
  if (!st.lanes) return make_error(errc::bad_job, "this shard has no bulk lane; send tensors in the messages");
  auto offer = st.lanes->end->offer(rank);
  if (!offer) return make_error(errc::bad_job, offer.error().message);
  st.lanes->closed.erase(rank);
  return std::move(*offer);
}

void forget_lane(shard_pointer self, std::uint32_t rank) {
  auto& st = self->state;
  if (!st.lanes) return;
  st.lanes->end->drop(rank, "the worker left the job");
  fail_backlog(self, rank, make_error(errc::not_member, "the worker left the job"));
  st.lanes->payloads.close(rank);
  st.lanes->closed.erase(rank);
  std::erase_if(st.lanes->overdue, [rank](const auto& k) { return k.first == rank; });
}

}  // namespace troupe::shard_shell
