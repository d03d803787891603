// lane: the bulk lanes between members and the shards they reach over the network, as
// the shells see them: the two ends' interfaces (the transport is transport/lane_transport.hpp)
// and the rendezvous of a message with its payload.
//
// Note [Bulk lanes]
// A tensor in a CAF message crosses memory five times on each side of a connection: CAF
// serializes it into the connection's buffer, the kernel copies it out, the receiver's
// middleman zeroes a buffer, the kernel copies into it, and the deserializer copies it
// out; and one middleman thread per process does all of it, one message at a time. So a
// member and a shard it reaches over the network move large tensors (lane::min_bytes and
// up) on a lane of their own: two TCP connections (TLS with the job's certificates when
// the node has them), one for gradients to the shard and one for pull answers to the
// member, each written and read by one thread of its own straight from and into the
// tensor's memory. The actor message still goes through CAF, with its checks and its
// deadline, and names the payload by a ticket (`lane_tensor`) instead of carrying it.
//
// Opening: the member asks the shard (`lane_open_atom`, over the authenticated actor
// channel, so only the rank's own actor gets an answer) for an offer: the port of the
// shard's lane listener and a one-time token of 32 random bytes bound to the member's
// rank. It dials both connections (TLS: the shard must present a server's certificate
// for the host dialled, the member a worker's) and sends the token in a hello on each;
// the shard welcomes a connection whose token it issued (within a deadline, once per
// direction) and closes any other, counting the refusal. Until both are welcomed, and
// for good if opening fails, tensors go in the messages.
//
// Order: a shard handles each member's messages in the order they came, as CAF delivers
// them: a push whose payload has not arrived yet holds that member's later messages (its
// pulls must see its pushes), not anyone else's, and fails when the payload does not come
// within the request timeout or its lane closes. A pull answered on the lane sends the
// payload before the reply; the member keeps whichever of the two comes first until the
// other does (`rendezvous`). A payload nobody waits for any more (its call timed out) is
// dropped when it comes; a shard keeps at most max_kept payloads per member that no
// message has named, and closes the lane of a member that sends more.
//
// Note [Scanned on arrival]
// A shard refuses a gradient with NaN or Inf before it touches the parameters, which
// means reading every byte once more after the lane has written it: for 40 MB, about 5 ms
// of the shard's actor thread, from memory. So the shard's lane reader scans each f32
// payload for NaN and Inf as it reads it, a chunk at a time while the chunk is still in
// cache, and says what it found (`arrival::finite`); the shell passes that to the core,
// which then skips its own scan. A payload the reader did not scan (any other dtype: a
// compressed gradient, which the shell decodes, and the core scans after decoding) says
// false, and the core scans it as any gradient from a message.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"
#include "transport/lane_offer.hpp"
#include "transport/lane_tensor.hpp"

namespace troupe::lane {

// Tensors of fewer bytes go in the message: a lane saves their copies but costs a second
// channel's latency.
inline constexpr std::size_t min_bytes = std::size_t{256} << 10;
// Payloads a shard keeps per member before their messages come.
inline constexpr std::size_t max_kept = 64;

// A payload as a shard's lane reader passed it on (Note [Scanned on arrival]).
struct arrival {
  tensor data;
  bool finite = false;  // an f32 payload the reader found free of NaN and Inf; false: unscanned
};

// The shard's end: a listener, the connections of the members it welcomed, and a writer
// per member for pull answers. Made by the node, driven by the shard's shell; its
// handlers run on the transport's threads.
class shard_end {
 public:
  struct handlers {
    std::function<void(std::uint32_t rank, std::uint64_t ticket, arrival payload)> payload;
    std::function<void(std::uint32_t rank, const std::string& why)> closed;
  };
  virtual ~shard_end() = default;
  // Once, before the first offer.
  virtual void start(handlers h) = 0;
  // A one-time token for member `rank`'s two connections, replacing any earlier one.
  virtual expected<lane_offer> offer(std::uint32_t rank) = 0;
  // Queues `payload` for member `rank` under `ticket` (moved from only then); false when it
  // has no open lane.
  virtual bool send(std::uint32_t rank, std::uint64_t ticket, tensor&& payload) = 0;
  // Closes rank's connections (it left, or broke the lane's rules); its handlers say so.
  virtual void drop(std::uint32_t rank, const std::string& why) = 0;
};

// A member's end: its lanes to the shards, opened on request.
class member_end {
 public:
  struct handlers {
    std::function<void(std::uint32_t shard)> opened;
    std::function<void(std::uint32_t shard, std::uint64_t ticket, tensor payload)> payload;
    std::function<void(std::uint32_t shard, const std::string& why)> closed;  // also when opening failed
  };
  virtual ~member_end() = default;
  virtual void start(handlers h) = 0;
  // Dials shard `shard` at host:offer.port in the background; handlers.opened or .closed follows.
  virtual void open(std::uint32_t shard, const std::string& host, const lane_offer& offer) = 0;
  // Queues `payload` for shard `shard` under `ticket` (moved from only then); false when no
  // lane to it is open.
  virtual bool send(std::uint32_t shard, std::uint64_t ticket, tensor&& payload) = 0;
  // Payloads sent to `shard` that its socket has not taken yet; 0 when no lane is open.
  virtual std::size_t unsent(std::uint32_t shard) const = 0;
};

// The descriptor of `t` sent on a lane under `ticket`.
lane_tensor describe(std::uint64_t ticket, const tensor& t);
// `payload` (flat, as it came) shaped as `d` says, or why it does not fit.
expected<tensor> shaped(tensor payload, const lane_tensor& d);

// A message that names a payload, and the payload, meet here whichever comes first.
// Keyed by peer (a rank on the shard, a shard on the member) and ticket. Not thread-safe:
// the shell's actor owns it.
template <class Waiter, class Payload = tensor>
class rendezvous {
 public:
  using key = std::pair<std::uint32_t, std::uint64_t>;
  struct met {
    Waiter waiter;
    Payload payload;
  };

  // The payload of k arrived: the waiter it completes, if one waits; otherwise it is kept
  // for the message (or dropped, when k was abandoned). Returns nullopt then.
  std::optional<met> payload(key k, Payload t) {
    if (abandoned_.erase(k)) return std::nullopt;
    if (auto w = waiting_.find(k); w != waiting_.end()) {
      met m{std::move(w->second), std::move(t)};
      waiting_.erase(w);
      return m;
    }
    kept_[k] = std::move(t);
    return std::nullopt;
  }
  // A message names k: its payload if it is here (taken, and w left as it is); else
  // nullopt, and w (moved) waits.
  std::optional<Payload> wait(key k, Waiter&& w) {
    if (auto t = take(k)) return t;
    waiting_.insert_or_assign(k, std::move(w));
    return std::nullopt;
  }
  // k's payload if it is here (taken).
  std::optional<Payload> take(key k) {
    auto it = kept_.find(k);
    if (it == kept_.end()) return std::nullopt;
    Payload t = std::move(it->second);
    kept_.erase(it);
    return t;
  }
  // Nobody will wait for k any more: its waiter is forgotten, its payload dropped now or
  // when it comes.
  void abandon(key k) {
    waiting_.erase(k);
    if (!kept_.erase(k)) abandoned_.insert(k);
  }
  // The lane of `peer` closed: its waiters, to fail; what it kept is dropped.
  std::vector<Waiter> close(std::uint32_t peer) {
    std::vector<Waiter> out;
    for (auto it = waiting_.lower_bound({peer, 0}); it != waiting_.end() && it->first.first == peer;) {
      out.push_back(std::move(it->second));
      it = waiting_.erase(it);
    }
    erase_peer(kept_, peer);
    erase_peer(abandoned_, peer);
    return out;
  }
  // Payloads of `peer` kept for messages that have not named them yet.
  std::size_t kept(std::uint32_t peer) const {
    std::size_t n = 0;
    for (auto it = kept_.lower_bound({peer, 0}); it != kept_.end() && it->first.first == peer; ++it) ++n;
    return n;
  }
  bool waits(key k) const { return waiting_.contains(k); }

 private:
  template <class C>
  static void erase_peer(C& c, std::uint32_t peer) {
    auto it = c.lower_bound({peer, 0});
    auto end = c.lower_bound({peer + 1, 0});
    if (peer == UINT32_MAX) end = c.end();
    c.erase(it, end);
  }
  std::map<key, Waiter> waiting_;
  std::map<key, Payload> kept_;
  std::set<key> abandoned_;
};

}  // namespace troupe::lane
