// The pipeline_stage actor's ends of its links to peers, held in its state
// (actors/stage_state.hpp): the slots and doorbells of its calls in flight to its shards,
// its bulk lanes, and its ring's mailboxes and lanes to its neighbours.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/member_lanes.hpp"
#include "actors/protocol.hpp"
#include "core/ring_lanes.hpp"
#include "core/ring_link.hpp"
#include "transport/channel_pool.hpp"
#include "transport/shard_call.hpp"
#include "transport/shard_links.hpp"
#include "transport/ring_mailbox.hpp"
#include "transport/word_waiter.hpp"

namespace troupe::stage_shell {

// The member's calls in flight to its shards, by shard (a member has one pull and one push
// in flight to each): the slots each holds until it is settled (transport/shard_call.hpp,
// through its links, which choose and lend them).
struct stage_slot_calls {
  std::vector<shard_call> pulls, pushes;
};

// Note [Doorbells] (stage_bells.cpp): the member's pushes and pulls in flight through its
// channels' bell blocks, by call id; the blocks whose answers it watches, by shard; the
// shards whose doorbell closed; and the thread that watches (declared after the fast
// path's pool, so it stops before the segments go).
struct stage_bells {
  struct call {
    std::uint32_t shard = 0;
    std::function<void(kv_pull_reply&)> on_params;  // a pull's
    std::function<void(kv_push_ack&)> on_ack;         // a push's
    std::function<void(caf::error&)> on_error;
    std::chrono::steady_clock::time_point sent;
  };
  std::map<std::uint64_t, call> calls;
  std::uint64_t next_id = 1;
  std::map<std::uint32_t, shm::bell_block> watched;
  std::set<std::uint32_t> closed;
  bool deadline_due = false;  // a bell_deadline is on its way
  std::shared_ptr<std::atomic<bool>> answered_due = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<word_waiter> waiter;
  std::set<std::uint32_t> to_ring;  // shards posted to since the last ring_bells
  bool awaiting = false;            // await_answers is waiting on this thread
  // Answers taken; of them, taken by await_answers; the waiter's nudges that found none
  // (logged at the member's end: Note [Waiting for the answers]).
  std::uint64_t answers = 0, answers_awaited = 0, empty_nudges = 0;
};

// --mode allreduce between processes of one host (Note [Ring mailboxes] in
// transport/ring_mailbox.hpp): the member's ring link (core/ring_link.hpp, shared with the
// core), with the outbox it writes its pieces for ring_next into, the pieces that wait for
// room in it, and the inbox it maps of ring_prev's; whether the outbox was offered (with
// the first piece); an offer that came before the member trained waits here with its
// sender.
struct stage_ring_mailboxes {
  std::shared_ptr<ring_link> link = std::make_shared<ring_link>();
  bool offered = false;
  bool drain_due = false;  // a ring_drain is on its way
  std::function<void()> once_drained;  // what waits for the link to have no piece waiting (the member's finish)
  bool next_gone = false;              // ring_next is gone: its pieces are dropped
  std::optional<std::pair<caf::actor_addr, ring_mailbox_offer>> early_offer;
};

// --mode allreduce between hosts (Note [Ring lanes] in core/ring_lanes.cpp): the lanes
// to ring_next and from ring_prev, and an ask of ring_prev's that came before this member
// trained, answered once it does.
struct stage_ring_lanes {
  ring_lanes link;
  std::optional<caf::typed_response_promise<lane_offer>> early_ask;
  caf::actor_addr early_asker;
};

}  // namespace troupe::stage_shell
