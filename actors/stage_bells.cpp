// stage_bells: a member's end of its channels' doorbells (Note [Doorbells] in
// transport/doorbell.hpp): posting a push or a pull whose tensor lies in a slot of the channel,
// watching the answers, handing each to its call's handler, and failing calls past the
// request timeout (which closes the channel, as a timed-out request does).
//
// Note [Waiting for the answers]
// A member whose calls went through doorbells and whose mailbox is empty would go idle;
// the shard's answer would then wake the waiter's thread, which nudges the actor, which
// wakes the actor's thread: two wake-ups where one would do. A detached member (its
// thread is its own) instead waits on its own thread for up to answer_wait, on the
// answer queues' counts (transport/word_waiter::await_change), and takes the answers as soon
// as they are posted; their handlers run the next step, whose calls it waits for in turn.
// It stops waiting when nothing is in flight, when anything is in its mailbox (a message
// waits at most answer_wait), and when no answer came for answer_wait (the wait starts
// again with each answer taken, since its handler made the next calls). Meanwhile
// `answered_due` stays set, handlers included, so the waiter (woken by the same counts)
// sends no nudge for what this thread takes itself; after, anything posted since is nudged
// for as the waiter would have, and a nudge's handler ends with this wait too. Were it
// cleared while the handlers run (they compute the next step), the waiter would nudge for
// the answers that come meanwhile, which this thread then takes itself: the nudge finds
// nothing, the member goes idle, and its next answer reaches it through the waiter (two
// wake-ups). Measured in a launched async MLP, a member took 44% of its answers as it
// waited, and nudges that found nothing numbered 44% of its answers; kept set, 99% and
// 1-2% (the line each member logs at its end), and in 8 alternating pairs of 3-epoch
// launched runs the job ran at a median 1.045x (0.97x-1.15x).
#include <spdlog/spdlog.h>

#include "actors/bell_records.hpp"
#include "actors/stage_state.hpp"

namespace troupe::stage_shell {

namespace {

using steady = std::chrono::steady_clock;

// How long a member waits on its own thread for answers before it goes idle: a pull's
// round trip through the doorbells took about 0.6 ms here; a pull that a shard holds (a
// sync round still open) is left to the waiter after this.
constexpr std::chrono::microseconds answer_wait{2000};

std::chrono::milliseconds timeout_of(stage_pointer self) {
  return std::chrono::milliseconds(self->state.core->place().job.request_timeout_ms);
}

caf::error timed_out_error(const std::string& why) { return caf::make_error(caf::sec::request_timeout, why); }

// The doorbell to shard s stops: every call still in flight through it fails as timed out
// (its slots may still be written, so the channel closes), and later calls go as messages.
void close_bell(stage_pointer self, std::uint32_t s, const std::string& why) {
  auto& b = self->state.bells;
  if (!b.closed.insert(s).second) return;
  spdlog::warn("{}: stops using its doorbell to shard {} ({}); its calls go as messages", who(self), s, why);
  if (auto it = b.watched.find(s); it != b.watched.end()) {
    if (b.waiter) b.waiter->unwatch(it->second.answers().posted_word());
    b.watched.erase(it);
  }
  std::vector<stage_bells::call> failed;
  for (auto it = b.calls.begin(); it != b.calls.end();)
    if (it->second.shard == s) {
      failed.push_back(std::move(it->second));
      it = b.calls.erase(it);
    } else {
      ++it;
    }
  for (auto& c : failed) {
    caf::error e = timed_out_error("the doorbell to shard " + std::to_string(s) + " closed: " + why);
    c.on_error(e);
  }
}

// The bell block of `channel` to shard s, if the member may ring it now: the channel is
// confirmed and open, the shard listens there, and its answers are watched.
std::optional<shm::bell_block> usable_bell(stage_pointer self, std::uint32_t s, std::size_t channel) {
  auto& st = self->state;
  auto& b = st.bells;
  if (!st.opts.doorbells || b.closed.contains(s)) return std::nullopt;
  auto bell = st.links->bell(s, channel);
  if (!bell || !bell->listening()) return std::nullopt;
  if (auto it = b.watched.find(s); it != b.watched.end())
    return it->second.base() == bell->base() ? bell : std::nullopt;
  if (!word_waiter::supported()) return std::nullopt;
  if (!b.waiter) b.waiter = bells::nudging_waiter<bells_answered>(self, b.answered_due);
  if (!b.waiter->watch(bell->answers().posted_word())) return std::nullopt;
  b.watched.emplace(s, *bell);
  spdlog::info("{}: sends its pushes and pulls to shard {} through the channel's doorbell", who(self), s);
  return bell;
}

void arm_deadline(stage_pointer self, std::chrono::milliseconds after) {
  auto& b = self->state.bells;
  if (b.deadline_due) return;
  b.deadline_due = true;
  self->delayed_send(self, after, bell_deadline{});
}

template <class Msg>
bool ring(stage_pointer self, std::uint32_t s, std::optional<std::size_t> channel, bells::kind k, const Msg& m,
          stage_bells::call c) {
  if (!channel) return false;
  auto bell = usable_bell(self, s, *channel);
  if (!bell) return false;
  auto& b = self->state.bells;
  const std::uint64_t id = b.next_id;
  auto rec = bells::record(self->system(), k, id, m);
  if (!rec || !bell->requests().post(*rec)) return false;  // goes as a message
  ++b.next_id;
  c.shard = s;
  c.sent = steady::now();
  b.calls.emplace(id, std::move(c));
  b.to_ring.insert(s);
  arm_deadline(self, timeout_of(self));
  return true;
}

// One answer from shard s, to its call.
void take_answer(stage_pointer self, std::uint32_t s, const std::vector<std::byte>& rec) {
  auto& b = self->state.bells;
  auto& sys = self->system();
  auto h = bells::head_of(rec);
  auto it = h ? b.calls.find(h->id) : b.calls.end();
  if (it == b.calls.end() || it->second.shard != s) {
    spdlog::warn("{}: dropped an answer through shard {}'s doorbell that answers no call in flight", who(self), s);
    return;
  }
  stage_bells::call c = std::move(it->second);
  b.calls.erase(it);
  auto bad = [&](const char* what) {
    caf::error e = make_error(fault{errc::malformed, std::string("shard ") + std::to_string(s) + "'s " + what +
                                                         " through the doorbell does not decode"});
    c.on_error(e);
  };
  switch (h->kind) {
    case bells::kind::ack: {
      kv_push_ack a;
      if (!c.on_ack || !bells::body_of(sys, rec, a)) return bad("push answer");
      return c.on_ack(a);
    }
    case bells::kind::params: {
      kv_pull_reply p;
      if (!c.on_params || !bells::body_of(sys, rec, p)) return bad("pull answer");
      return c.on_params(p);
    }
    case bells::kind::error: {
      caf::error e;
      if (!bells::body_of(sys, rec, e)) return bad("error");
      return c.on_error(e);
    }
    default:
      return bad("answer");
  }
}

// Whether an answer waits in any watched block; `counts` gets each answer count read, the
// values to wait on when none does.
bool answers_posted(stage_bells& b, std::vector<std::pair<std::uint32_t*, std::uint32_t>>& counts) {
  counts.clear();
  bool posted = false;
  for (auto& [s, bell] : b.watched) {
    std::uint32_t count = 0;
    posted = bell.answers().unread(count) || posted;
    counts.emplace_back(bell.answers().posted_word(), count);
  }
  return posted;
}

// Takes every answer posted, shard by shard in order, and says how many; each handler may
// carry out actions and ring again.
std::uint64_t take_posted_answers(stage_pointer self) {
  auto& b = self->state.bells;
  const std::uint64_t before = b.answers;
  std::vector<std::uint32_t> shards;
  for (const auto& [s, bell] : b.watched) shards.push_back(s);
  for (std::uint32_t s : shards) {
    for (;;) {
      auto it = b.watched.find(s);  // a handler may have closed it
      if (it == b.watched.end()) break;
      bool corrupt = false;
      auto rec = it->second.answers().take(corrupt);
      if (corrupt) {
        close_bell(self, s, "its answer queue's counts are corrupt");
        break;
      }
      if (!rec) break;
      ++b.answers;
      take_answer(self, s, *rec);
    }
  }
  return b.answers - before;
}

}  // namespace

bool ring_pull(stage_pointer self, std::uint32_t s, const kv_pull& r, std::function<void(kv_pull_reply&)> ok,
               std::function<void(caf::error&)> failed) {
  const auto& pulls = self->state.slots.pulls;
  const auto channel = s < pulls.size() ? pulls[s].reply_channel() : std::nullopt;
  return ring(self, s, channel, bells::kind::pull, r, {0, std::move(ok), nullptr, std::move(failed), {}});
}

bool ring_push(stage_pointer self, std::uint32_t s, const kv_push& g, std::function<void(kv_push_ack&)> ok,
               std::function<void(caf::error&)> failed) {
  const auto& pushes = self->state.slots.pushes;
  const auto channel = s < pushes.size() ? pushes[s].push_channel() : std::nullopt;
  return ring(self, s, channel, bells::kind::push, g, {0, nullptr, std::move(ok), std::move(failed), {}});
}

void on_bells_answered(stage_pointer self) {
  auto& b = self->state.bells;
  b.answered_due->store(false);
  if (take_posted_answers(self) == 0) ++b.empty_nudges;
  await_answers(self);  // a nudge that finds what this thread took itself still waits
}

void await_answers(stage_pointer self) {
  auto& b = self->state.bells;
  if (!self->state.opts.detached || b.awaiting || b.calls.empty() || b.watched.empty()) return;
  b.awaiting = true;
  b.answered_due->store(true);
  auto until = steady::now() + answer_wait;
  std::vector<std::pair<std::uint32_t*, std::uint32_t>> counts;
  while (!b.calls.empty() && self->mailbox().empty()) {
    if (answers_posted(b, counts)) {
      b.answers_awaited += take_posted_answers(self);  // answered_due stays set: the waiter leaves them
      until = steady::now() + answer_wait;  // the wait for the calls their handlers made
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - steady::now());
    if (left.count() <= 0 || counts.size() > word_waiter::max_words || !word_waiter::await_change(counts, left)) break;
  }
  b.awaiting = false;
  b.answered_due->store(false);
  if (answers_posted(b, counts) && !b.answered_due->exchange(true)) self->send(self, bells_answered{});
}

void ring_bells(stage_pointer self) {
  auto& b = self->state.bells;
  for (std::uint32_t s : std::exchange(b.to_ring, {}))
    if (auto it = b.watched.find(s); it != b.watched.end()) it->second.requests().ring();
}

void on_bell_deadline(stage_pointer self) {
  auto& b = self->state.bells;
  b.deadline_due = false;
  if (b.calls.empty()) return;
  const auto timeout = timeout_of(self);
  const auto now = steady::now();
  std::set<std::uint32_t> late;
  for (const auto& [id, c] : b.calls)
    if (now - c.sent >= timeout) late.insert(c.shard);
  for (std::uint32_t s : late)
    close_bell(
        self, s,
        "a call through it had no answer within the request timeout (" + std::to_string(timeout.count()) + " ms)");
  if (b.calls.empty()) return;
  auto oldest = now;
  for (const auto& [id, c] : b.calls) oldest = std::min(oldest, c.sent);
  arm_deadline(self, std::chrono::duration_cast<std::chrono::milliseconds>(oldest + timeout - now) +
                         std::chrono::milliseconds(1));
}

}  // namespace troupe::stage_shell
