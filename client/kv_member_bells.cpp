// kv_member_bells: a key-value member's pushes and pulls through its channels' doorbells
// (Note [Doorbells] in transport/doorbell.hpp), kept by actors/member_bells as a stage's
// are. A call whose data lies in a slot of a confirmed channel, to a shard listening at
// that channel's bell block, is posted there instead of sent as a message, and is the
// store's call in flight as a request is: the job's loss, its shard's loss (Note [A shard
// away], which also closes that shard's doorbells: calls to its replacement go as
// messages) and the request timeout end it once, whichever comes first. The client's
// pool keeps up to 8 channels per shard, each with one push slot and one reply slot, so a
// block holds at most one push and one pull in flight, within its queue of 4 records.
#include "client/kv_member_state.hpp"

namespace troupe::kv::member_shell {

namespace {

member_bells& bells_of(member_pointer self) {
  auto& st = self->state;
  if (!st.bells)
    st.bells = bells_of_actor(self, "troupe.kv (" + worker_name(st.place.rank) + ")", request_timeout(self));
  return *st.bells;
}

// The bell block of `channel` to shard s, when this member rings doorbells at all.
std::optional<shm::bell_block> bell_of(member_pointer self, std::uint32_t s, std::optional<std::size_t> channel) {
  const auto& opts = self->state.opts;
  if (!opts.doorbells || !opts.links || !channel || self->state.lost) return std::nullopt;
  return opts.links->bell(s, *channel);
}

// Posts `msg` to shard s through `bell` as the store's call in flight, answered once to
// `done`; false: nothing was posted.
template <class Reply, class Msg>
bool post(member_pointer self, std::uint32_t s, std::optional<shm::bell_block> bell, const Msg& msg,
          const std::function<void(or_fault<Reply>)>& done) {
  if (!bell) return false;
  auto& st = self->state;
  const std::uint64_t id = st.next;
  auto [ok, failed] = answered_once<Reply>(self, id, request_timeout(self), done);
  member_bells::call c;
  c.on_error = std::move(failed);
  bool posted = false;
  if constexpr (std::is_same_v<Msg, kv_pull>) {
    c.on_params = std::move(ok);
    posted = bells_of(self).post_pull(s, bell, msg, std::move(c));
  } else {
    c.on_ack = std::move(ok);
    posted = bells_of(self).post_push(s, bell, msg, std::move(c));
  }
  if (!posted) return false;
  ++st.next;
  track(self, id, s, done);
  st.bells->ring();  // each call is its own message, so it wakes the shard at once
  return true;
}

}  // namespace

bool ring_push(member_pointer self, const member_call_push& c) {
  return post<kv_push_ack>(self, c.shard, bell_of(self, c.shard, c.channel), c.msg, c.done);
}

bool ring_pull(member_pointer self, const member_call_pull& c) {
  return post<kv_pull_reply>(self, c.shard, bell_of(self, c.shard, c.channel), c.msg, c.done);
}

void on_bells_answered(member_pointer self) {
  if (self->state.bells) self->state.bells->on_answered();
}

void on_bell_deadline(member_pointer self) {
  if (self->state.bells) self->state.bells->on_deadline();
}

void close_bells(member_pointer self, std::optional<std::uint32_t> shard, const std::string& why) {
  auto& b = self->state.bells;
  if (!b) return;
  if (shard)
    b->close(*shard, why);
  else
    b->forget_all(why);
}

}  // namespace troupe::kv::member_shell
