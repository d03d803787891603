// inline_nudge: sending a local actor a message from a thread of our own and, when that
// message is what wakes the actor, running the actor right there instead of waking one
// of CAF's scheduler threads for it (Note [Nudging inline]).
//
// Note [Nudging inline]
// A doorbell's waiter thread (Note [Doorbells] in transport/doorbell.hpp) wakes when a peer
// posts, and used to send its actor a message: that woke a scheduler thread, which then
// served the records. On the two cores that also compute, each wake-up is a trip through
// the kernel's run queue; a shard's round trip took three (its waiter, its actor's thread,
// the member's thread) where one process needs two. CAF schedules an actor through its
// mailbox: the send that finds the mailbox blocked (the actor idle) hands the actor to the
// sender's execution unit (`exec_later`), and from then on only whoever holds it resumes
// it, until the actor blocks its mailbox again. So the waiter sends through an execution
// unit of its own, which takes the actor it is handed and resumes it on the waiter's
// thread; the actor runs one thread at a time as always, only on another thread. Anything
// the actor wakes in turn (its answers to local actors) goes to the scheduler. After
// `max_messages` messages an actor with more mail goes back to the scheduler, so the
// waiter returns to its words. When the mailbox was not blocked (the actor busy on a
// scheduler thread), the message waits there as any other.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstddef>
#include <thread>
#include <utility>

namespace troupe {

// One thread's unit for nudging inline. An actor keeps the unit it last ran on as its
// context (a response promise delivered later takes the context from it), so the unit
// should live as long as the thread that nudges: any other thread that reaches it only
// hands actors to the scheduler.
class inline_unit final : public caf::execution_unit {
 public:
  explicit inline_unit(caf::actor_system& sys) : caf::execution_unit(&sys) {}

  // Sends `msg` to the local actor `dest` anonymously; if that woke it, runs it here.
  template <class Message>
  void nudge(const caf::strong_actor_ptr& dest, Message&& msg) {
    taker_.store(std::this_thread::get_id());
    dest->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::forward<Message>(msg)), this);
    taker_.store(std::thread::id{});
    if (auto* job = std::exchange(taken_, nullptr)) run(job);
  }

  void exec_later(caf::resumable* job) override {
    if (taker_.load() == std::this_thread::get_id() && taken_ == nullptr)
      taken_ = job;  // the actor nudge() woke, with the reference its enqueue added
    else
      system().scheduler().enqueue(job);
  }

 private:
  static constexpr std::size_t max_messages = 64;

  void run(caf::resumable* job) {
    switch (job->resume(this, max_messages)) {
      case caf::resumable::resume_later:
        system().scheduler().enqueue(job);  // more mail: the reference goes with it
        break;
      case caf::resumable::done:
      case caf::resumable::awaiting_message:
      case caf::resumable::shutdown_execution_unit:
        caf::intrusive_ptr_release(job);
        break;
    }
  }

  std::atomic<std::thread::id> taker_{};  // the thread inside nudge()'s enqueue
  caf::resumable* taken_ = nullptr;       // only that thread's
};

}  // namespace troupe
