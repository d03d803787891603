// Which samples each member trains, and the dealing of a lost member's untrained samples
// and of a slow member's shed rows to the others (Note [Dealing a lost worker's samples],
// Note [Balancing shares]): the positions every rank trains at each step of an epoch, the
// grants of extra rows that carry another rank's positions, the rows a member keeps of
// its own, and the coordinator's dealer that decides them. CAF-free; the coordinator's
// core owns the dealer, each member its grants and kept rows.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/job.hpp"
#include "core/messages.hpp"

namespace troupe {

// Note [Dealing a lost worker's samples]
// Every epoch draws one permutation of the training set (epoch_permutation). With W
// planned workers and batch B, rank r trains at step s of the epoch the permutation's
// positions (s*B + j)*W + r for j < batch_rows(s): its static share, the same as
// epoch_indices deals. When a worker is lost, the positions its rank would still have
// trained are orphaned: those of its current epoch at once (from the clock it last
// reported), those of each later epoch when the fastest member nears that epoch (while
// the rank stays vacant), and the extra rows it had been granted but not reached. The
// coordinator's dealer splits orphaned positions among the members that can still take
// them in their epoch, in proportion to the steps each has left there, and sends each a
// grant: positions of epoch e spread evenly over its steps [from_step, S). A member
// trains them as extra rows of those steps (at most max_extra_rows_for(B) a step; what
// fits nowhere is counted as lost), with the step's gradient still scaled by its own rows,
// so a sync round's sum is the whole round's samples / B, as before the loss.
// That cap is B + ceil(B / 8): a whole share more (the one a lost worker of two leaves
// its survivor) and an eighth for the rows a grant cannot reach, since it starts
// `lookahead` steps ahead of the member and, when it arrives after its first step, is
// returned and dealt again from later still. With a cap of B a 2-worker sync job that
// lost a worker at an epoch's start left 80 of its rows untrained every time, and 208 or
// 272 when the grant came back; the eighth spreads them over the epoch's steps left.
//
// A member answers every grant: taken, when its first step lies ahead of the step the
// member is in, or returned, and the dealer deals a returned grant again. It plans a grant
// `lookahead` steps past the member's last report, so a return is rare. A member's
// answers and reports reach the coordinator in the order they were sent, before the news
// of its death: so a lost member's grant that was never answered had none of its rows
// trained, and one taken had its rows trained up to the member's last report. A replacement of the lost rank takes it
// back from the first clock whose share was not dealt (a sync replacement at the next
// epoch boundary that was not dealt yet). A member that dies after pushing a step but
// before reporting it may have that step's positions trained twice; the dealer counts
// only reported steps as trained. Pipelines and local groups do not deal: a lost stage
// stops its replica and a lost group member stops the group.
//
// Note [Balancing shares]
// A member that computes slower than the others (by its rows per second of compute, in
// its step reports; core/job_deals.cpp decides) is told to keep only the first `keep` rows
// of its own share of each step, from a clock the dealer names: a shed. The positions it
// gives up are orphaned as a lost rank's are (each epoch's as the fastest member nears
// it) and dealt to the members
// that shed nothing (what does not fit there to shedding members, the shedder itself
// among them: trained slowly rather than not at all), so every sample is still trained
// once an epoch, and the slow member's steps shrink until it keeps pace. Its gradient
// stays scaled by its whole share's rows, so each sample weighs what it did. A shed
// applies from the member's next step while the fastest member is in the same epoch
// (always in sync) and the others have room in their steps left there for the rest of
// that epoch's rows, which go to them at once; else from the first epoch that no member
// has begun, whose rows
// are dealt as the fastest member nears it, when every other member has all of its steps
// in it left to take them (in async a slow member lags epochs behind, and the rows of its
// epoch would find no member still in it). The dealer orphans a member's shed positions up to its
// `dealt_until` clock; a shed that raises `keep` (the member got faster) applies no sooner
// than that, where none of the rows it takes back were dealt, and dealt_until stays put
// until the member answers; the positions that a lower keep gives up before dealt_until
// are orphaned when it answers. A lost member is a shed to keep 0 from dealt_until, with
// the kept rows it had not reached orphaned too.
struct deal_shape {
  std::int64_t workers = 1;             // W: the job's planned workers (ranks)
  std::int64_t batch = 1;               // B
  std::int64_t samples_per_worker = 0;  // floor(train size / W)
  std::int64_t steps_per_epoch = 1;     // S
  std::int64_t total_steps = 0;         // S x epochs
  std::int64_t max_extra_rows = 0;      // extra rows a member may train in one step
};
deal_shape deal_shape_of(const job_spec& job);
// The extra rows a member may take in one step at batch B (Note [Dealing a lost worker's
// samples]).
std::int64_t max_extra_rows_for(std::int64_t batch);
// Whether the job deals a lost member's samples to the others (one stage, shard servers,
// no local groups, no key-value job, several workers).
bool deals_samples(const job_spec& job);
// Whether the coordinator balances shares (Note [Balancing shares]; --share-balance).
bool balances_shares(const job_spec& job);

// Rank's static positions at `clock` (epoch clock / S, step clock % S), rows
// [first_row, end_row) of its step, appended to out.
void static_positions(const deal_shape& d, std::uint32_t rank, std::int64_t clock, std::vector<std::int64_t>& out,
                      std::int64_t first_row = 0,
                      std::int64_t end_row = std::numeric_limits<std::int64_t>::max());

// A member's own rows kept per step (Note [Balancing shares]): from each clock in the map
// on, `keep` rows (before the first, all of them).
class kept_rows {
 public:
  kept_rows() = default;
  explicit kept_rows(std::int64_t all) : all_(all) {}
  std::int64_t at(std::int64_t clock) const;
  // From `from` on, keep `keep` (later changes are forgotten).
  void set(std::int64_t from, std::int64_t keep);
  // The fewest kept from `clock` on.
  std::int64_t least_from(std::int64_t clock) const;
  // What it keeps once every change has come.
  std::int64_t last() const { return from_.empty() ? all_ : from_.rbegin()->second; }
  bool changed() const { return !from_.empty(); }

 private:
  std::int64_t all_ = std::numeric_limits<std::int64_t>::max();
  std::map<std::int64_t, std::int64_t> from_;
};

// The positions of g at `step` of its epoch (none outside [from_step, S)).
std::span<const std::int64_t> grant_rows_at(const rows_grant& g, std::int64_t steps_per_epoch, std::int64_t step);

// A member's side: the grants it holds, by the clock their rows fall on.
class member_grants {
 public:
  // positions: how many each epoch has (W x samples per worker); max_extra: rows a step
  // may add.
  explicit member_grants(std::int64_t steps_per_epoch = 1,
                         std::int64_t max_extra = std::numeric_limits<std::int64_t>::max(),
                         std::int64_t positions = std::numeric_limits<std::int64_t>::max())
      : spe_(steps_per_epoch), max_extra_(max_extra), positions_(positions) {}
  // Takes g if its first step comes after `clock` (the step the member is in), its
  // positions exist and no step would pass max_extra rows; false: it must go back to the
  // coordinator.
  bool take(rows_grant g, std::int64_t clock);
  // The extra positions at `clock`, in grant order.
  std::vector<std::int64_t> rows_at(std::int64_t clock) const;
  std::int64_t count_at(std::int64_t clock) const;
  // Forgets grants whose steps all lie before `clock`.
  void drop_before(std::int64_t clock);
  bool empty() const { return grants_.empty(); }

 private:
  std::int64_t spe_, max_extra_, positions_;
  std::vector<rows_grant> grants_;
};

// The coordinator's side: what each rank has trained and been granted, what is orphaned,
// and the grants that deal it.
class sample_dealer {
 public:
  static constexpr std::int64_t lookahead = 2;

  // Every rank live from `start_clock` (a resumed job's clock, or 0).
  sample_dealer(deal_shape d, std::uint32_t ranks, std::int64_t start_clock);

  // The member of `rank` reported `clock` steps finished.
  void reported(std::uint32_t rank, std::int64_t clock);
  // The member finished all its steps: it takes no more grants, and one it did not
  // answer is orphaned.
  void done(std::uint32_t rank);
  // The member was lost; it had reported `clock`. Its untrained positions are orphaned.
  void lost(std::uint32_t rank);
  // A replacement takes `rank`, wanting to start at `clock`: the clock it starts at, not
  // before the first whose share was not dealt; the rank's share between that and what
  // was dealt is orphaned.
  std::int64_t replace(std::uint32_t rank, std::int64_t clock);
  // The member of `rank` answered grant `id`: taken, or returned (it had passed its
  // first step); or shed `id`: taken from `from_clock`, or refused. An answer to no grant
  // or shed of a live, unfinished rank is ignored.
  void answered(std::uint32_t rank, std::uint64_t id, bool taken, std::int64_t from_clock = 0);
  // Note [Balancing shares]: tell `rank` to keep `keep` rows of its own per step (1 to the
  // batch); nothing while its last shed is unanswered, or when it already keeps that many.
  std::optional<rows_shed> shed(std::uint32_t rank, std::int64_t keep);
  // The rows `rank` keeps once its answered sheds apply (the batch: all).
  std::int64_t keeps(std::uint32_t rank) const;
  // Deals what is orphaned (and each vacant rank's next epoch once the fastest member
  // nears it): the grants to send, by rank.
  std::vector<std::pair<std::uint32_t, rows_grant>> deal();

  // Positions granted and still their holder's (trained, or to be): a returned grant, or
  // a lost holder's untrained rows, count again only when dealt again.
  std::int64_t dealt() const { return dealt_; }
  std::int64_t lost_positions() const { return lost_; }  // orphaned positions no member could take
  // Positions of vacant ranks' later epochs not orphaned yet (nobody neared them): at the
  // job's end, untrained too.
  std::int64_t never_dealt() const;
  const deal_shape& shape() const { return d_; }

 private:
  struct rank_state {
    bool live = true, done = false;
    std::int64_t clock = 0;         // steps reported
    std::int64_t dealt_until = 0;   // vacant: its static share before this clock is dealt or trained
    std::vector<std::pair<rows_grant, bool>> grants;  // sent and not returned; taken?
    std::map<std::int64_t, std::int64_t> extra;  // clock -> extra rows granted
    kept_rows kept;                              // vacant: 0 from dealt_until
    std::optional<std::pair<std::uint64_t, std::int64_t>> shed;  // sent, unanswered: id, keep
  };
  // Orphans the rows rank does not keep at clocks [dealt_until, to); dealt_until = to.
  void advance(std::uint32_t rank, std::int64_t to);
  // Orphans rows [first, end(clock)) of rank's static share at clocks [from, to).
  void orphan_rows(std::uint32_t rank, std::int64_t from, std::int64_t to,
                   const std::function<std::pair<std::int64_t, std::int64_t>(std::int64_t)>& rows);
  // A shedding member takes only what no other member can.
  bool sheds(const rank_state& s) const;
  bool others_can_take(std::uint32_t rank, std::int64_t keep) const;
  void orphan_grant_rows(const rows_grant& g, std::int64_t from_clock, std::int64_t to_clock);
  void deal_epoch(std::int32_t epoch, std::vector<std::int64_t>& positions,
                  std::vector<std::pair<std::uint32_t, rows_grant>>& out);
  std::int64_t room(const rank_state& s, std::int64_t from, std::int64_t to) const;

  deal_shape d_;
  std::vector<rank_state> ranks_;
  std::map<std::int32_t, std::vector<std::int64_t>> orphans_;  // by epoch
  std::uint64_t next_id_ = 1;
  std::int64_t dealt_ = 0, lost_ = 0;
};

}  // namespace troupe
