// The pipeline_stage actor's ends of its links to peers, held in its state
// (actors/stage_state.hpp): the slots of its calls in flight to its shards,
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

#include "actors/member_bells.hpp"
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
