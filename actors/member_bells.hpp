// member_bells: a member's end of its channels' doorbells (Note [Doorbells] in
// transport/doorbell.hpp), whatever kind of member it is: posting a push or a pull whose
// tensor lies in a slot of a channel, watching the answers, handing each to its call's
// handlers, and failing the calls to a shard when its doorbells close (the request
// timeout passed, or its answers are corrupt). The stage shell's members
// (actors/stage_bells.cpp) keep one; so may any member that calls shards through
// transport/shard_call. The shell lends what only it can do: nudge its actor, and send it
// the deadline.
#pragma once

#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/bell_records.hpp"
#include "actors/protocol.hpp"
#include "transport/doorbell.hpp"
#include "transport/word_waiter.hpp"

namespace troupe {

class member_bells {
 public:
  // What the member's shell lends: its actor system (records are CAF's binary format),
  // its name for the log, a waiter whose changes nudge its actor (bells::nudging_waiter,
  // setting `due` while a nudge is on its way), and a way to send its actor the deadline
  // message after a delay (the actor then calls on_deadline).
  struct shell {
    caf::actor_system* sys = nullptr;
    std::string who;
    std::function<std::unique_ptr<word_waiter>(std::shared_ptr<std::atomic<bool>> due)> make_waiter;
    std::function<void(std::chrono::milliseconds after)> send_deadline;
  };
  // A call's handlers: a pull's answer, a push's, or why it failed (exactly one runs).
  struct call {
    std::function<void(kv_pull_reply&)> on_params;
    std::function<void(kv_push_ack&)> on_ack;
    std::function<void(caf::error&)> on_error;
  };
  // Counts for the member's last log line (Note [Waiting for the answers] in
  // actors/stage_bells.cpp): answers taken, of them while the member waited on its own
  // thread, and the waiter's nudges that found none.
  struct counts {
    std::uint64_t answers = 0, answers_awaited = 0, empty_nudges = 0;
  };

  member_bells(shell sh, std::chrono::milliseconds timeout);
  ~member_bells();  // stops the waiter before the blocks' memory may go
  member_bells(const member_bells&) = delete;
  member_bells& operator=(const member_bells&) = delete;

  // Posts the call to shard s through `bell`, the bell block of the channel whose slot it
  // uses, when the member may ring it: the shard listens there, its doorbells to s are
  // not closed, and the block's answers can be watched. false: nothing was posted (and
  // the handlers are dropped); send it as an actor message.
  bool post_pull(std::uint32_t s, std::optional<shm::bell_block> bell, const kv_pull& r, call c);
  bool post_push(std::uint32_t s, std::optional<shm::bell_block> bell, const kv_push& g, call c);
  // Wakes the shards posted to since the last call, once each.
  void ring();
  // Shard s's doorbells stop: every call in flight through them fails as timed out (its
  // slots may still be written, so its channel closes), and later calls go as messages.
  void close(std::uint32_t s, const std::string& why);
  // Stops watching every block (before the channels' memory goes; e.g. a new welcome
  // wires new channels): the calls in flight fail as by close, and later ones may ring
  // again.
  void forget_all(const std::string& why);

  // The waiter's nudge: takes every answer posted.
  void on_answered();
  // The deadline message: closes the doorbells of the shards with a call past the timeout.
  void on_deadline();
  // Waits on the calling thread for the answers to the calls in flight and takes them,
  // while `idle` says the member has nothing else to do (Note [Waiting for the answers]);
  // `nudge` sends the actor the waiter's trigger for answers posted after. A call from
  // inside a handler returns at once.
  void await(const std::function<bool()>& idle, const std::function<void()>& nudge);

  bool in_flight() const { return !calls_.empty(); }
  const counts& taken() const { return counts_; }

 private:
  struct pending {
    std::uint32_t shard = 0;
    call handlers;
    std::chrono::steady_clock::time_point sent;
  };
  struct block {
    std::uint32_t shard = 0;
    shm::bell_block bell;
  };

  std::optional<shm::bell_block> usable(std::uint32_t s, std::optional<shm::bell_block> bell);
  bool post(std::uint32_t s, shm::bell_block bell, std::optional<std::vector<std::byte>> rec, call c);
  void unwatch(std::map<std::byte*, block>::iterator it);
  void fail(std::vector<pending> calls, const std::string& why);
  void take_answer(std::uint32_t s, const std::vector<std::byte>& rec);
  std::uint64_t take_posted();
  bool answers_posted(std::vector<std::pair<std::uint32_t*, std::uint32_t>>& words);
  void arm_deadline(std::chrono::milliseconds after);

  shell shell_;
  std::chrono::milliseconds timeout_;
  std::map<std::uint64_t, pending> calls_;
  std::uint64_t next_id_ = 1;
  std::map<std::byte*, block> watched_;  // by the block's base
  std::set<std::uint32_t> closed_;
  std::set<std::byte*> to_ring_;  // blocks posted to since the last ring
  bool deadline_due_ = false;     // a deadline message is on its way
  bool awaiting_ = false;         // await is waiting on this thread
  std::shared_ptr<std::atomic<bool>> answered_due_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<word_waiter> waiter_;
  counts counts_;
};

// The doorbells of member actor `self` (a stage, or a key-value member), named `who`
// in the log: its waiter nudges it with bells_answered, and its deadline comes as
// bell_deadline; its handlers of those call on_answered and on_deadline.
template <class Self>
std::unique_ptr<member_bells> bells_of_actor(Self self, std::string who, std::chrono::milliseconds timeout) {
  member_bells::shell sh;
  sh.sys = &self->system();
  sh.who = std::move(who);
  sh.make_waiter = [self](std::shared_ptr<std::atomic<bool>> due) {
    return bells::nudging_waiter<bells_answered>(self, std::move(due));
  };
  sh.send_deadline = [self](std::chrono::milliseconds after) { self->delayed_send(self, after, bell_deadline{}); };
  return std::make_unique<member_bells>(std::move(sh), timeout);
}

}  // namespace troupe
