// bell_records: a member's push or pull and the shard's answer as doorbell records (Note
// [Doorbells] in transport/doorbell.hpp): the record's kind, the call's id, and the message in
// CAF's binary format, the same bytes it would cross the network in; and the waiter that
// nudges an end's actor when records are posted. Shared by the two ends,
// actors/shard_bells.cpp and actors/stage_bells.cpp.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "actors/inline_nudge.hpp"
#include "actors/protocol.hpp"
#include "transport/doorbell.hpp"
#include "transport/word_waiter.hpp"

namespace troupe::bells {

enum class kind : std::uint8_t { push = 1, pull = 2, ack = 3, params = 4, error = 5 };

struct head {
  enum kind kind;
  std::uint64_t id = 0;
};
inline constexpr std::size_t head_bytes = 9;

// The record of `x` under (k, id); nullopt when it is longer than a record holds.
template <class T>
std::optional<std::vector<std::byte>> record(caf::actor_system& sys, enum kind k, std::uint64_t id, T x) {
  std::vector<char> body;
  caf::binary_serializer sink{sys, body};
  if (sink(x) || head_bytes + body.size() > shm::bell_record_payload) return std::nullopt;
  std::vector<std::byte> out(head_bytes + body.size());
  out[0] = static_cast<std::byte>(k);
  std::memcpy(out.data() + 1, &id, sizeof id);
  if (!body.empty()) std::memcpy(out.data() + head_bytes, body.data(), body.size());
  return out;
}

// A record's kind and id; nullopt when it is too short or of no kind.
inline std::optional<head> head_of(std::span<const std::byte> rec) {
  if (rec.size() < head_bytes) return std::nullopt;
  const auto k = static_cast<std::uint8_t>(rec[0]);
  if (k < 1 || k > 5) return std::nullopt;
  head h{static_cast<enum kind>(k), 0};
  std::memcpy(&h.id, rec.data() + 1, sizeof h.id);
  return h;
}

// The message a record carries after its head; false when its bytes do not decode as T.
template <class T>
bool body_of(caf::actor_system& sys, std::span<const std::byte> rec, T& out) {
  if (rec.size() < head_bytes) return false;
  caf::binary_deserializer source{sys, reinterpret_cast<const char*>(rec.data()) + head_bytes, rec.size() - head_bytes};
  return !source(out) && source.remaining() == 0;
}

// An answer's error as a record; a detail too long for a record is cut.
std::vector<std::byte> error_record(caf::actor_system& sys, std::uint64_t id, const caf::error& e);

// The waiter of one end's bell blocks: a change of a watched word sends `self`'s actor a
// Trigger, one at a time, and runs the actor on the waiter's thread when that wakes it
// (Note [Nudging inline] in actors/inline_nudge.hpp). `due` is set while one is on its
// way; the actor clears it before it takes what was posted, so nothing posted after that
// goes unseen.
template <class Trigger, class Self>
std::unique_ptr<word_waiter> nudging_waiter(Self self, std::shared_ptr<std::atomic<bool>> due) {
  auto weak = caf::actor_cast<caf::weak_actor_ptr>(self);
  auto unit = std::make_shared<inline_unit>(self->home_system());  // as long as the waiter's thread
  return std::make_unique<word_waiter>([weak, due, unit] {
    if (due->exchange(true)) return;
    if (auto strong = weak.lock()) unit->nudge(strong, Trigger{});
  });
}

}  // namespace troupe::bells
