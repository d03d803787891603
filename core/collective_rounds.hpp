// collective_rounds: the collectives of a key-value job's members (allreduce, broadcast,
// allgather), as one shard serves its share of them, free of CAF. The shard server's
// kv side (actors/shard_kv.cpp) and the local group's hub (client/local_transport.cpp)
// host one each.
//
// Note [Collectives on the shards]
// Horovod's calls (hvd.allreduce, hvd.broadcast, hvd.allgather) reduce among the workers.
// A key-value job already has the servers that BytePS calls a summation service, so a
// member's store cuts each call's tensor into pieces, one or more per shard
// (client/collectives.cpp), and each shard combines the pieces it is given: a member
// sends and receives each element once, and the work is spread over the shards.
//   - A piece has a name that every member gives alike: the call's name (the user's, or
//     the store's count of its calls, so every member must make its calls in the same
//     order, as Horovod asks) and the piece's index. A round is the pieces of one name.
//   - A round waits for the members live when its first piece came. It closes when each
//     of them has given its piece, and every giver gets the same answer: reductions
//     combine the pieces in ascending rank order, so every member gets the same bits and
//     a rerun gets them again.
//   - A member that leaves or dies before giving its piece fails the round for everyone
//     with member_lost, naming it (a sum without it would be silently wrong). One that
//     gave its piece and then left does not: the round has all it needs.
//   - A piece that disagrees with the round's first (kind, op, root, element count) fails
//     the round for everyone with bad_shape naming both; a piece of a reduction holding
//     NaN or infinity fails it with not_finite naming its rank (a sum with it would make
//     every member's values NaN). A failed round's name is
//     remembered until each member it waited for has been told, so a late piece is
//     answered with the same fault instead of opening a round nobody else will join.
//   - Each member has at most `max_open` pieces waiting, so a member cannot make a shard
//     hold unbounded memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/errc.hpp"
#include "core/kv_messages.hpp"

namespace troupe {

class collective_rounds {
 public:
  using token = std::uint64_t;
  struct answer {
    token t = 0;
    std::variant<std::shared_ptr<const kv_collective_reply>, fault> result;
  };

  explicit collective_rounds(std::size_t max_open = 1024) : max_open_(max_open) {}

  void start(const std::vector<std::uint32_t>& members);
  void member_joined(std::uint32_t member);
  // Fails every open round that waits for the member's piece.
  void member_left(std::uint32_t member);

  // Takes c.worker's piece (the sender was checked by the caller). A fault refuses this
  // piece alone, now; otherwise the piece's answer comes from take_answers() once its
  // round closes or fails.
  std::optional<fault> give(token t, kv_collective c);
  std::vector<answer> take_answers();

  std::size_t open_rounds() const { return rounds_.size(); }
  std::size_t remembered_failures() const { return failed_.size(); }

 private:
  struct piece {
    token t = 0;
    tensor data;
    std::vector<std::int64_t> dims;
  };
  struct round {
    kv_collective first;                                // kind, op, root, dims; its data moves to pieces
    std::set<std::uint32_t> waits_for;                  // the members live when it opened
    std::map<std::uint32_t, piece> pieces;              // by rank
  };
  struct failure {
    fault why;
    std::set<std::uint32_t> untold;  // members it waited for that have not given a piece since
  };

  std::optional<fault> check(const kv_collective& c) const;
  std::optional<std::string> disagreement(const kv_collective& first, const kv_collective& c) const;
  void fail(const std::string& name, const fault& why);
  // c's piece is refused with `why`, and so is its round on every member.
  fault spoil(const kv_collective& c, const fault& why);
  void close(const std::string& name);
  std::size_t open_pieces_of(std::uint32_t member) const;

  std::size_t max_open_;
  bool started_ = false;
  std::set<std::uint32_t> live_;
  std::map<std::string, round> rounds_;
  std::map<std::string, failure> failed_;
  std::vector<answer> answers_;
};

}  // namespace troupe
