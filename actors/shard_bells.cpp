// shard_bells: a shard's end of its members' doorbells (Note [Doorbells] in
// transport/doorbell.hpp): watching the bell block of each channel it answered into, taking the
// pushes and pulls posted there in order as the member whose segment it is, and answering
// each through the same block.
#include <spdlog/spdlog.h>

#include "actors/bell_records.hpp"
#include "actors/shard_state.hpp"
#include "monitoring/refusals.hpp"

namespace troupe::shard_shell {

namespace {

bool watched(shard_pointer self, std::uint32_t rank, std::byte* base) {
  auto it = self->state.bells.find(rank);
  return it != self->state.bells.end() && it->second.contains(base);
}

// Posts `rec` to the answers of the bell block at `base`, still watched for member rank,
// and wakes the member. An answer that finds the queue full closes the doorbell: the
// member keeps at most one push and one pull in flight to a shard, so only a broken
// member fills it, and its call then times out.
void post_answer(shard_pointer self, std::uint32_t rank, std::byte* base, const std::vector<std::byte>& rec) {
  if (!watched(self, rank, base)) return;  // the member left; its segment is gone
  shm::bell_block b(base);
  if (!b.answers().post(rec)) {
    spdlog::warn("shard {}: worker {}'s doorbell has no room for an answer; it stops answering there",
                 self->state.index, rank);
    unwatch_bells(self, rank, nullptr, 0);
    return;
  }
  if (self->state.serving_bells)
    self->state.bells_to_ring.emplace(rank, base);  // the member hears once, after everything posted
  else
    b.answers().ring();
}

// Where a call that came through the bell block at `base` is answered.
template <class T>
answer_to<T> through_bell(shard_pointer self, std::uint32_t rank, std::byte* base, std::uint64_t id, bells::kind k) {
  return answer_to<T>(std::function<void(caf::expected<T>)>([=](caf::expected<T> x) {
    auto& sys = self->system();
    std::optional<std::vector<std::byte>> rec;
    if (x) rec = bells::record(sys, k, id, std::move(*x));
    if (!rec)
      rec = bells::error_record(
          sys, id, x ? make_error(fault{errc::malformed, "the answer does not fit a doorbell record"}) : x.error());
    post_answer(self, rank, base, *rec);
  }));
}

// A record from member rank's block that the shard does not serve. A call in another
// member's name is refused for the job's safety (troupe_refusals_total{reason=
// "not_a_member"}, logged once per member); a record that is not a call (it does not
// decode, names no kind, or is an answer) and counts beyond a full ring are a broken
// member's bytes, counted with the shard's other rejected messages
// (troupe_rejected_messages_total{reason="malformed"}) and logged once per member.
void refuse(shard_pointer self, std::uint32_t rank, errc code, const std::string& why) {
  auto& st = self->state;
  bool log = false;
  if (code == errc::not_member) {
    log =
        monitoring::count_refusal(monitoring::refusal::not_a_member, "worker " + std::to_string(rank) + "'s doorbell");
  } else {
    if (st.m) st.m->rejected(to_string(code))->Increment();
    log = st.bells_malformed_logged.insert(rank).second;
  }
  if (log) spdlog::warn("shard {}: refused a call through worker {}'s doorbell: {}", st.index, rank, why);
}

// A push or pull (Msg, answered with a Reply of kind `answer`) from member rank's block:
// served in the member's order as its actor message would be, or refused and answered so
// when it does not decode or names another member.
template <class Msg, class Reply, class Serve>
void serve_as(shard_pointer self, std::uint32_t rank, std::byte* base, const std::vector<std::byte>& rec,
              std::uint64_t id, const std::string& what, bells::kind answer, Serve serve) {
  auto& sys = self->system();
  Msg m;
  std::optional<fault> wrong;
  if (!bells::body_of(sys, rec, m))
    wrong = fault{errc::malformed, "a " + what + " through the doorbell that does not decode"};
  else if (m.worker != rank)
    wrong = fault{errc::not_member, "a " + what + " in the name of worker " + std::to_string(m.worker)};
  if (wrong) {
    refuse(self, rank, wrong->code, wrong->detail);
    return post_answer(self, rank, base, bells::error_record(sys, id, make_error(*wrong)));
  }
  std::uint64_t ticket = 0;  // a push's payload on the bulk lane, which a same-host member never uses
  if constexpr (std::is_same_v<Msg, kv_push>) ticket = m.lane.ticket;
  in_member_order_to(self, rank, ticket, std::move(m), through_bell<Reply>(self, rank, base, id, answer), serve);
}

// One record posted by member rank. A record of no known kind, or an answer where a call
// belongs, is refused with no answer (it names no call the member waits for).
void serve_record(shard_pointer self, std::uint32_t rank, std::byte* base, const std::vector<std::byte>& rec) {
  auto h = bells::head_of(rec);
  if (!h) return refuse(self, rank, errc::malformed, "a record of no known kind");
  if (h->kind == bells::kind::push)
    return serve_as<kv_push, kv_push_ack>(self, rank, base, rec, h->id, "push", bells::kind::ack, serve_push);
  if (h->kind == bells::kind::pull)
    return serve_as<kv_pull, kv_pull_reply>(self, rank, base, rec, h->id, "pull", bells::kind::params, serve_pull);
  refuse(self, rank, errc::malformed, "an answer where a call belongs");
}

}  // namespace

void watch_bell(shard_pointer self, std::uint32_t rank, const shared_tensor& reply_to) {
  auto& st = self->state;
  if (!st.channels || !word_waiter::supported()) return;
  std::byte* base = st.channels->bell_of(rank, reply_to);
  if (!base || watched(self, rank, base)) return;
  if (!st.bell_waiter) {
    st.channels->before_unmap(
        [self](std::uint32_t r, const std::byte* seg, std::size_t bytes) { unwatch_bells(self, r, seg, bytes); });
    st.bell_waiter = bells::nudging_waiter<bells_rung>(self, st.bells_rung_due);
  }
  shm::bell_block b(base);
  if (!st.bell_waiter->watch(b.requests().posted_word())) return;  // too many: this one uses messages
  st.bells[rank].insert(base);
  b.set_listening();
}

void on_bells_rung(shard_pointer self) {
  auto& st = self->state;
  st.bells_rung_due->store(false);
  // Each block in turn, every record it holds; a call served may unwatch blocks, so the
  // list is read again for each.
  std::vector<std::pair<std::uint32_t, std::byte*>> blocks;
  for (const auto& [rank, bases] : st.bells)
    for (auto* base : bases) blocks.emplace_back(rank, base);
  st.serving_bells = true;
  for (auto [rank, base] : blocks) {
    while (watched(self, rank, base)) {
      bool corrupt = false;
      auto rec = shm::bell_block(base).requests().take(corrupt);
      if (corrupt) {
        refuse(self, rank, errc::malformed, "its request queue's counts are corrupt; it is no longer read");
        unwatch_bells(self, rank, nullptr, 0);
        break;
      }
      if (!rec) break;
      serve_record(self, rank, base, *rec);
    }
  }
  st.serving_bells = false;
  for (auto [rank, base] : std::exchange(st.bells_to_ring, {}))
    if (watched(self, rank, base)) shm::bell_block(base).answers().ring();
}

void unwatch_bells(shard_pointer self, std::uint32_t rank, const std::byte* segment, std::size_t bytes) {
  auto& st = self->state;
  auto it = st.bells.find(rank);
  if (it == st.bells.end()) return;
  for (auto b = it->second.begin(); b != it->second.end();) {
    // The blocks inside the mapping [segment, +bytes); nullptr: every block of the member.
    if (segment && (*b < segment || *b >= segment + bytes)) {
      ++b;
      continue;
    }
    if (st.bell_waiter) st.bell_waiter->unwatch(shm::bell_block(*b).requests().posted_word());
    b = it->second.erase(b);
  }
  if (it->second.empty()) st.bells.erase(it);
}

}  // namespace troupe::shard_shell
