// member_bells: a member's end of its channels' doorbells (the bookkeeping of its calls in
// flight through them, by id; the blocks it watches; the deadline; closing).
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
#include "actors/member_bells.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "actors/bell_records.hpp"

namespace troupe {

namespace {

using steady = std::chrono::steady_clock;

// How long a member waits on its own thread for answers before it goes idle: a pull's
// round trip through the doorbells took about 0.6 ms here; a pull that a shard holds (a
// sync round still open) is left to the waiter after this.
constexpr std::chrono::microseconds answer_wait{2000};

}  // namespace

member_bells::member_bells(shell sh, std::chrono::milliseconds timeout) : shell_(std::move(sh)), timeout_(timeout) {}

member_bells::~member_bells() { waiter_.reset(); }

bool member_bells::post_pull(std::uint32_t s, std::optional<shm::bell_block> bell, const kv_pull& r, call c) {
  auto b = usable(s, bell);
  if (!b) return false;
  return post(s, *b, bells::record(*shell_.sys, bells::kind::pull, next_id_, r), std::move(c));
}

bool member_bells::post_push(std::uint32_t s, std::optional<shm::bell_block> bell, const kv_push& g, call c) {
  auto b = usable(s, bell);
  if (!b) return false;
  return post(s, *b, bells::record(*shell_.sys, bells::kind::push, next_id_, g), std::move(c));
}

// The block, if the member may ring it now: the shard listens there, its doorbells are
// open, and the block's answers are watched (watching it now if need be).
std::optional<shm::bell_block> member_bells::usable(std::uint32_t s, std::optional<shm::bell_block> bell) {
  if (!bell || !bell->listening() || closed_.contains(s)) return std::nullopt;
  if (auto it = watched_.find(bell->base()); it != watched_.end()) return it->second.shard == s ? bell : std::nullopt;
  if (!word_waiter::supported()) return std::nullopt;
  if (!waiter_) waiter_ = shell_.make_waiter(answered_due_);
  if (!waiter_->watch(bell->answers().posted_word())) return std::nullopt;
  const bool first = std::none_of(watched_.begin(), watched_.end(), [s](const auto& w) { return w.second.shard == s; });
  watched_.emplace(bell->base(), block{s, *bell});
  if (first) spdlog::info("{}: sends its pushes and pulls to shard {} through the channel's doorbell", shell_.who, s);
  return bell;
}

bool member_bells::post(std::uint32_t s, shm::bell_block bell, std::optional<std::vector<std::byte>> rec, call c) {
  if (!rec || !bell.requests().post(*rec)) return false;  // goes as a message
  calls_.emplace(next_id_++, pending{s, std::move(c), steady::now()});
  to_ring_.insert(bell.base());
  arm_deadline(timeout_);
  return true;
}

void member_bells::ring() {
  for (std::byte* base : std::exchange(to_ring_, {}))
    if (auto it = watched_.find(base); it != watched_.end()) it->second.bell.requests().ring();
}

void member_bells::unwatch(std::map<std::byte*, block>::iterator it) {
  if (waiter_) waiter_->unwatch(it->second.bell.answers().posted_word());
  to_ring_.erase(it->first);
  watched_.erase(it);
}

void member_bells::fail(std::vector<pending> calls, const std::string& why) {
  for (auto& c : calls) {
    caf::error e = caf::make_error(caf::sec::request_timeout, why);
    c.handlers.on_error(e);
  }
}

void member_bells::close(std::uint32_t s, const std::string& why) {
  if (!closed_.insert(s).second) return;
  spdlog::warn("{}: stops using its doorbell to shard {} ({}); its calls go as messages", shell_.who, s, why);
  for (auto it = watched_.begin(); it != watched_.end();) {
    auto next = std::next(it);
    if (it->second.shard == s) unwatch(it);
    it = next;
  }
  std::vector<pending> failed;
  for (auto it = calls_.begin(); it != calls_.end();)
    if (it->second.shard == s) {
      failed.push_back(std::move(it->second));
      it = calls_.erase(it);
    } else {
      ++it;
    }
  fail(std::move(failed), "the doorbell to shard " + std::to_string(s) + " closed: " + why);
}

void member_bells::forget_all(const std::string& why) {
  while (!watched_.empty()) unwatch(watched_.begin());
  std::vector<pending> failed;
  for (auto& [id, c] : std::exchange(calls_, {})) failed.push_back(std::move(c));
  fail(std::move(failed), why);
}

// One answer from shard s, to its call.
void member_bells::take_answer(std::uint32_t s, const std::vector<std::byte>& rec) {
  auto& sys = *shell_.sys;
  auto h = bells::head_of(rec);
  auto it = h ? calls_.find(h->id) : calls_.end();
  if (it == calls_.end() || it->second.shard != s) {
    spdlog::warn("{}: dropped an answer through shard {}'s doorbell that answers no call in flight", shell_.who, s);
    return;
  }
  call c = std::move(it->second.handlers);
  calls_.erase(it);
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

// Whether an answer waits in any watched block; `words` gets each answer count read, the
// values to wait on when none does.
bool member_bells::answers_posted(std::vector<std::pair<std::uint32_t*, std::uint32_t>>& words) {
  words.clear();
  bool posted = false;
  for (auto& [base, b] : watched_) {
    std::uint32_t count = 0;
    posted = b.bell.answers().unread(count) || posted;
    words.emplace_back(b.bell.answers().posted_word(), count);
  }
  return posted;
}

// Takes every answer posted, block by block in order, and says how many; each handler
// may make calls and post again, or close blocks.
std::uint64_t member_bells::take_posted() {
  const std::uint64_t before = counts_.answers;
  std::vector<std::byte*> bases;
  for (const auto& [base, b] : watched_) bases.push_back(base);
  for (std::byte* base : bases) {
    for (;;) {
      auto it = watched_.find(base);  // a handler may have closed it
      if (it == watched_.end()) break;
      const std::uint32_t s = it->second.shard;
      bool corrupt = false;
      auto rec = it->second.bell.answers().take(corrupt);
      if (corrupt) {
        close(s, "its answer queue's counts are corrupt");
        break;
      }
      if (!rec) break;
      ++counts_.answers;
      take_answer(s, *rec);
    }
  }
  return counts_.answers - before;
}

void member_bells::on_answered() {
  answered_due_->store(false);
  if (take_posted() == 0) ++counts_.empty_nudges;
}

void member_bells::await(const std::function<bool()>& idle, const std::function<void()>& nudge) {
  if (awaiting_ || calls_.empty() || watched_.empty()) return;
  awaiting_ = true;
  answered_due_->store(true);
  auto until = steady::now() + answer_wait;
  std::vector<std::pair<std::uint32_t*, std::uint32_t>> words;
  while (!calls_.empty() && idle()) {
    if (answers_posted(words)) {
      counts_.answers_awaited += take_posted();  // answered_due stays set: the waiter leaves them
      until = steady::now() + answer_wait;       // the wait for the calls their handlers made
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - steady::now());
    if (left.count() <= 0 || words.size() > word_waiter::max_words || !word_waiter::await_change(words, left)) break;
  }
  awaiting_ = false;
  answered_due_->store(false);
  if (answers_posted(words) && !answered_due_->exchange(true)) nudge();
}

void member_bells::arm_deadline(std::chrono::milliseconds after) {
  if (deadline_due_) return;
  deadline_due_ = true;
  shell_.send_deadline(after);
}

void member_bells::on_deadline() {
  deadline_due_ = false;
  if (calls_.empty()) return;
  const auto now = steady::now();
  std::set<std::uint32_t> late;
  for (const auto& [id, c] : calls_)
    if (now - c.sent >= timeout_) late.insert(c.shard);
  for (std::uint32_t s : late)
    close(s,
          "a call through it had no answer within the request timeout (" + std::to_string(timeout_.count()) + " ms)");
  if (calls_.empty()) return;
  auto oldest = now;
  for (const auto& [id, c] : calls_) oldest = std::min(oldest, c.sent);
  arm_deadline(std::chrono::duration_cast<std::chrono::milliseconds>(oldest + timeout_ - now) +
               std::chrono::milliseconds(1));
}

}  // namespace troupe
