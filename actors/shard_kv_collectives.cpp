// shard_kv_collectives: the pieces of a key-value job's collectives on a shard server
// (Note [Collectives on the shards] in core/collective_rounds.hpp): each taken from the
// message, the member's push slot or its bulk lane into the shard's rounds, and every
// member's answer once its round closes or fails. The sender is checked by shard_server.cpp.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"

namespace troupe::shard_shell {

namespace {

// A round's answer for one member: its data in the slot the member offered when the fast
// path can take it (Note [Same-host fast path]), else on its bulk lane when it asked
// (Note [Bulk lanes]), otherwise in the message.
kv_collective_reply collective_answer(shard_pointer self, const kv_collective_reply& result,
                                      const shard_state::waiting_piece& to) {
  auto& st = self->state;
  kv_collective_reply out{result.ranks, result.dims, {}, {}};
  if (!to.wants_data) return out;
  if (st.channels && !to.reply_to.empty() && !result.data.empty()) {
    std::string refused;
    if (auto where = st.channels->answer(to.worker, to.reply_to, result.data.view(), refused)) {
      out.shared = std::move(*where);
      return out;
    }
    if (!refused.empty()) spdlog::info("shard {}: answers worker {} over the network: {}", st.index, to.worker, refused);
  }
  out.data = tensor(result.data);
  if (auto d = answer_on_lane(self, to.worker, to.lane_reply, out.data)) out.lane = std::move(*d);
  return out;
}

}  // namespace

void settle_collectives(shard_pointer self) {
  auto& st = self->state;
  for (auto& a : st.collectives.take_answers()) {
    auto it = st.collective_promises.find(a.t);
    if (it == st.collective_promises.end()) continue;
    if (auto* f = std::get_if<fault>(&a.result))
      it->second.promise.deliver(make_error(*f));
    else
      it->second.promise.deliver(collective_answer(self, *std::get<0>(a.result), it->second));
    st.collective_promises.erase(it);
  }
}

bool kv_collective_on(shard_pointer self, kv_collective& c, caf::typed_response_promise<kv_collective_reply>& rp) {
  auto& st = self->state;
  if (!c.lane.empty()) {  // the piece's data on the member's bulk lane
    auto got = claim_payload(self, c.worker, c.lane);
    if (got.missing()) return false;
    if (!got.payload) {
      rp.deliver(make_error(errc::malformed, "collective piece: " + got.problem));
      return true;
    }
    c.data = std::move(*got.payload);
    c.lane = {};
  }
  if (!serves_kv(self)) {
    rp.deliver(not_kv(self));
    return true;
  }
  if (c.shard != st.index) {
    rp.deliver(wrong_shard(self, c.shard));
    return true;
  }
  const auto t = st.next_collective++;
  const std::uint32_t worker = c.worker;
  const std::uint64_t lane_reply = c.lane_reply;
  shared_tensor reply_to = std::move(c.reply_to);
  const bool wants_data = !(c.kind == collective_kind::broadcast && c.worker == c.root);
  if (!c.shared.empty()) {  // the piece lies in the member's push slot: copied out, the slot is free again
    auto data = st.channels ? st.channels->take_push(worker, c.shared)
                            : expected<tensor>(failure{"this shard's same-host fast path is off"});
    if (!data) {
      rp.deliver(make_error(errc::malformed, "collective piece's shared-memory slot: " + data.error().message));
      return true;
    }
    c.data = std::move(*data);
    c.shared = {};
  }
  if (auto f = st.collectives.give(t, std::move(c))) {
    spdlog::warn("shard {}: refused member {}'s collective piece: {}", st.index, worker, to_string(*f));
    if (st.m) st.m->rejected(to_string(f->code))->Increment();
    settle_kv(self);  // a disagreeing piece fails the others' pieces of its round too
    rp.deliver(make_error(*f));
    return true;
  }
  st.collective_promises.emplace(t, shard_state::waiting_piece{rp, worker, std::move(reply_to), wants_data, lane_reply});
  settle_kv(self);
  return true;
}

}  // namespace troupe::shard_shell
