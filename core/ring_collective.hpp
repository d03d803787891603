// ring_collective: one rank's part of a collective over a ring of `world` ranks, as
// pieces in and pieces out, with no threads and no transport (Note [The ring]): all-reduce
// (sum, avg, max), broadcast from a root, and all-gather of blocks of any sizes. A shell
// carries every outgoing piece to the right neighbour (rank + 1 mod world) and hands
// every piece from the left neighbour to receive(), in any order: the result does not
// depend on it, so pieces may travel on several lanes at once.
//
// Note [The ring]
// All-reduce is a reduce-scatter and then an all-gather (Patarasuk and Yuan; Horovod and
// NCCL do the same). The tensor is cut into `world` chunks (the first numel % world of
// them one element longer). Chunk c starts at rank c, which sends its own values to
// c + 1; each rank on the way combines what arrives with its own values and passes the
// result on, so after world - 1 hops rank c - 1, the chunk's owner, holds chunk c reduced
// over every rank in the fixed order c, c + 1, ..., c - 1. The owner divides by world
// for avg, and the result goes round the ring once more, every rank copying it. So every
// rank ends with the same bits, and a run gives the same bits every time, whatever order
// the pieces arrive in. Each chunk travels in pieces of at most `piece_elems` elements,
// each passed on as soon as it is combined, so every link carries data at once and no
// rank waits for a whole chunk. Each rank sends and receives 2 (world - 1) / world of the
// tensor, whatever the world size.
// Broadcast is the all-gather phase with one chunk, the whole tensor, owned by the root;
// all-gather is the all-gather phase with chunk r, rank r's block, owned by rank r.
//
// A piece is checked before it touches anything: the collective's number, its phase and
// chunk (a rank receives each chunk once per phase, and never the one it starts or
// owns), its offset and length, its dtype, that it is not a second copy, and that an
// all-gather piece does not overtake this rank's reduce-scatter of the same elements. A
// refused piece changes nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "base/errc.hpp"
#include "base/expected.hpp"
#include "tensor/tensor.hpp"
#include "transport/lane_tensor.hpp"
#include "transport/shared_tensor.hpp"

namespace troupe {

// How a reduction combines the ranks' values (on the wire: new ones go last). Max and min
// carry a NaN through; avg is the sum divided by the ranks at the end.
enum class reduce_op : std::uint8_t { sum, avg, max, min, product };
inline constexpr reduce_op last_reduce_op = reduce_op::product;
expected<reduce_op> parse_reduce_op(std::string_view name);
std::string_view name_of(reduce_op op);
// out[i] = a[i] combined with b[i] under op (out may be a or b), for the ring and the
// shards alike: one rule, so both give the same bits.
void combine_values(reduce_op op, float* out, const float* a, const float* b, std::int64_t n);

enum class ring_phase : std::uint8_t { reduce_scatter = 0, all_gather = 1 };

// What travels between neighbours.
struct ring_piece {
  std::uint64_t collective = 0;  // the call's number in the group; every rank numbers its calls alike
  ring_phase phase = ring_phase::reduce_scatter;
  std::uint32_t chunk = 0;
  std::int64_t offset = 0;  // the piece's first element in the whole tensor
  tensor values;            // f32
  // Between processes of one host: where in the sender's ring mailbox the values lie
  // (Note [Ring mailboxes] in transport/ring_mailbox.hpp), `values` empty; the receiving
  // shell fills `values` from it before the collective sees the piece.
  shared_tensor shared;
  // Between hosts, once a bulk lane is open: the ticket its values come under on the lane
  // (Note [Ring lanes] in core/ring_lanes.cpp), `values` empty; filled by the
  // receiving shell too.
  lane_tensor lane;
};

struct ring_spec {
  std::uint32_t world = 1, rank = 0;
  std::uint64_t collective = 0;
  std::int64_t piece_elems = std::int64_t{1} << 16;  // 256 KiB of floats
};

class ring_collective {
 public:
  // `values` (f32, contiguous) holds this rank's input and, once done(), the result; it
  // must outlive the collective. The spec is checked (world >= 1, rank < world,
  // piece_elems >= 1), and so are root and counts.
  static expected<ring_collective> all_reduce(const ring_spec& spec, tensor_view values, reduce_op op);
  static expected<ring_collective> broadcast(const ring_spec& spec, tensor_view values, std::uint32_t root);
  // Every rank passes the same counts (one per rank); `out` holds their sum, and rank r's
  // block lands at the sum of counts[0..r). `mine` (counts[rank] floats) is copied in now.
  static expected<ring_collective> all_gather(const ring_spec& spec, const_tensor_view mine, tensor_view out,
                                              const std::vector<std::int64_t>& counts);

  // Where the pieces this rank sends are computed: a (numel) f32 tensor, such as one in a
  // ring mailbox (Note [Ring mailboxes] in transport/ring_mailbox.hpp), or an empty tensor
  // for a fresh one. Unset: fresh tensors, and a piece passed on is the one that came,
  // summed into in place; set: a piece passed on is computed into a new buffer, and the
  // one that came is dropped.
  using piece_buffers = std::function<tensor(std::int64_t numel)>;
  void set_piece_buffers(piece_buffers f) { buffers_ = std::move(f); }

  // The pieces this rank sends first. Call once; receive() may come before it.
  std::vector<ring_piece> start();

  struct outcome {
    std::vector<ring_piece> send;  // to the right neighbour
    std::optional<fault> refused;  // set when the piece was not applied
  };
  // Takes the piece (a piece passed on is the one that came, summed into in place).
  outcome receive(ring_piece p);

  // Started, and every piece this rank expects has arrived: `values` holds the result.
  bool done() const { return started_ && missing_ == 0; }
  // Pieces this rank still expects from its left neighbour.
  std::int64_t pieces_missing() const { return missing_; }
  // Started, and every reduce-scatter piece this rank expects has arrived (all-reduce;
  // true from the start for broadcast and all-gather).
  bool scattered() const { return started_ && scatter_missing_ == 0; }
  const ring_spec& spec() const { return spec_; }

 private:
  struct chunk {
    std::int64_t lo = 0, hi = 0;
    std::uint32_t owner = 0;  // who holds it whole and starts its all-gather
  };
  ring_collective(const ring_spec& spec, tensor_view values, reduce_op op, bool reduces, std::vector<chunk> chunks);
  static std::optional<std::string> check(const ring_spec& spec, const_tensor_view values);

  std::int64_t pieces_of(const chunk& c) const;
  // Hops from the chunk's first sender to this rank in a phase: 1 for its right neighbour.
  std::uint32_t hops(ring_phase phase, std::uint32_t c) const;
  bool receives(ring_phase phase, std::uint32_t c) const;
  std::optional<fault> refusal(const ring_piece& p) const;
  // A piece carrying buffer `values` (a fresh one when empty), copied from this rank's
  // values unless `fill` is false.
  ring_piece piece(ring_phase phase, std::uint32_t c, std::int64_t offset, std::int64_t numel, tensor values = {},
                   bool fill = true) const;
  // A buffer for an outgoing piece from piece_buffers; empty when unset or none is free.
  tensor buffer(std::int64_t numel) const { return buffers_ ? buffers_(numel) : tensor{}; }
  // out[i] = in[i] (op) own[i]; out may be in or own.
  void combine(float* out, const float* in, const float* own, std::int64_t n) const;

  ring_spec spec_;
  tensor_view values_;
  reduce_op op_ = reduce_op::sum;
  bool reduces_ = false;  // all-reduce: a reduce-scatter phase before the all-gather
  std::vector<chunk> chunks_;
  std::vector<std::vector<bool>> got_[2];  // per phase, per chunk, per piece
  std::int64_t missing_ = 0, scatter_missing_ = 0;
  bool started_ = false;
  piece_buffers buffers_;
};

}  // namespace troupe
