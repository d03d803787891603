// Static shares, grants of extra rows and the coordinator's dealer (Note [Dealing a lost
// worker's samples] in core/sample_deal.hpp).
#include "core/sample_deal.hpp"

#include <algorithm>
#include <limits>

namespace troupe {

deal_shape deal_shape_of(const job_spec& job) {
  deal_shape d;
  d.workers = std::max<std::int64_t>(1, job.workers);
  d.batch = std::max<std::int64_t>(1, job.train.batch_size);
  d.samples_per_worker = samples_per_worker(job);
  d.steps_per_epoch = std::max<std::int64_t>(1, steps_per_epoch(job));
  d.total_steps = d.steps_per_epoch * job.train.epochs;
  d.max_extra_rows = deals_samples(job) ? max_extra_rows_for(d.batch) : 0;
  return d;
}

std::int64_t max_extra_rows_for(std::int64_t batch) { return batch + (batch + 7) / 8; }

bool deals_samples(const job_spec& job) {
  return job.pipeline_stages == 1 && job.servers > 0 && !job.local_reduce && !job.kv && job.workers > 1;
}

bool balances_shares(const job_spec& job) {
  return deals_samples(job) && (job.balance_shares == share_balance::on ||
                                (job.balance_shares == share_balance::automatic && !in_lockstep(job.mode)));
}

void static_positions(const deal_shape& d, std::uint32_t rank, std::int64_t clock, std::vector<std::int64_t>& out,
                      std::int64_t first_row, std::int64_t end_row) {
  const std::int64_t s = clock % d.steps_per_epoch;
  const std::int64_t rows = std::min({d.batch, d.samples_per_worker - s * d.batch, end_row});
  for (std::int64_t j = std::max<std::int64_t>(0, first_row); j < rows; ++j)
    out.push_back((s * d.batch + j) * d.workers + rank);
}

// ---------------------------------------------------------------------------------------
// Kept rows

std::int64_t kept_rows::at(std::int64_t clock) const {
  auto it = from_.upper_bound(clock);
  return it == from_.begin() ? all_ : std::prev(it)->second;
}

void kept_rows::set(std::int64_t from, std::int64_t keep) {
  from_.erase(from_.lower_bound(from), from_.end());
  from_[from] = keep;
}

std::int64_t kept_rows::least_from(std::int64_t clock) const {
  std::int64_t least = at(clock);
  for (auto it = from_.upper_bound(clock); it != from_.end(); ++it) least = std::min(least, it->second);
  return least;
}

std::span<const std::int64_t> grant_rows_at(const rows_grant& g, std::int64_t steps_per_epoch, std::int64_t step) {
  if (step < g.from_step || step >= steps_per_epoch) return {};
  const auto n = static_cast<std::int64_t>(g.positions.size());
  const std::int64_t steps = steps_per_epoch - g.from_step, i = step - g.from_step;
  const std::int64_t begin = n * i / steps, end = n * (i + 1) / steps;
  return std::span<const std::int64_t>(g.positions).subspan(static_cast<std::size_t>(begin),
                                                            static_cast<std::size_t>(end - begin));
}

// ---------------------------------------------------------------------------------------
// A member's grants

bool member_grants::take(rows_grant g, std::int64_t clock) {
  if (g.epoch < 0 || g.from_step < 0 || g.from_step >= spe_ || g.epoch * spe_ + g.from_step <= clock) return false;
  for (std::int64_t p : g.positions)
    if (p < 0 || p >= positions_) return false;
  for (std::int64_t step = g.from_step; step < spe_; ++step)
    if (count_at(g.epoch * spe_ + step) + static_cast<std::int64_t>(grant_rows_at(g, spe_, step).size()) > max_extra_)
      return false;
  grants_.push_back(std::move(g));
  return true;
}

std::vector<std::int64_t> member_grants::rows_at(std::int64_t clock) const {
  std::vector<std::int64_t> out;
  for (const rows_grant& g : grants_) {
    if (g.epoch != clock / spe_) continue;
    const auto rows = grant_rows_at(g, spe_, clock % spe_);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

std::int64_t member_grants::count_at(std::int64_t clock) const {
  std::int64_t n = 0;
  for (const rows_grant& g : grants_)
    if (g.epoch == clock / spe_) n += static_cast<std::int64_t>(grant_rows_at(g, spe_, clock % spe_).size());
  return n;
}

void member_grants::drop_before(std::int64_t clock) {
  std::erase_if(grants_, [&](const rows_grant& g) { return (g.epoch + 1) * spe_ <= clock; });
}

// ---------------------------------------------------------------------------------------
// The dealer

sample_dealer::sample_dealer(deal_shape d, std::uint32_t ranks, std::int64_t start_clock) : d_(d), ranks_(ranks) {
  for (rank_state& s : ranks_) {
    s.clock = s.dealt_until = start_clock;
    s.kept = kept_rows(d_.batch);
  }
}

void sample_dealer::reported(std::uint32_t rank, std::int64_t clock) {
  if (rank >= ranks_.size() || !ranks_[rank].live) return;
  rank_state& s = ranks_[rank];
  s.clock = std::max(s.clock, clock);
  s.extra.erase(s.extra.begin(), s.extra.lower_bound(s.clock));
}

void sample_dealer::done(std::uint32_t rank) {
  if (rank >= ranks_.size() || !ranks_[rank].live) return;
  rank_state& s = ranks_[rank];
  // Its answers came before its last report: a grant it did not answer, it never took,
  // nor a shed; the rows it shed up to the end are the others' now.
  s.shed.reset();
  advance(rank, d_.total_steps);
  s.done = true;
  for (const auto& [g, taken] : s.grants)
    if (!taken) orphan_grant_rows(g, 0, std::numeric_limits<std::int64_t>::max());
  s.grants.clear();
  s.extra.clear();
}

void sample_dealer::lost(std::uint32_t rank) {
  if (rank >= ranks_.size() || !ranks_[rank].live || ranks_[rank].done) return;
  rank_state& s = ranks_[rank];
  s.shed.reset();  // unanswered: never applied
  // What it shed up to its last report, then the rows it kept and had not reached where
  // the rest was dealt already, then all of its share to the end of its epoch.
  advance(rank, s.clock);
  const kept_rows kept = s.kept;
  orphan_rows(rank, s.clock, s.dealt_until,
              [&](std::int64_t c) { return std::pair<std::int64_t, std::int64_t>{0, kept.at(c)}; });
  s.kept.set(s.dealt_until, 0);
  s.live = false;
  advance(rank, std::min((s.clock / d_.steps_per_epoch + 1) * d_.steps_per_epoch, d_.total_steps));
  for (const auto& [g, taken] : s.grants) orphan_grant_rows(g, taken ? s.clock : 0, std::numeric_limits<std::int64_t>::max());
  s.grants.clear();
  s.extra.clear();
}

std::int64_t sample_dealer::replace(std::uint32_t rank, std::int64_t clock) {
  if (rank >= ranks_.size()) return clock;
  rank_state& s = ranks_[rank];
  if (s.live) return clock;
  const std::int64_t from = std::max(clock, s.dealt_until);
  advance(rank, from);
  s = rank_state{};
  s.kept = kept_rows(d_.batch);
  s.clock = s.dealt_until = from;
  return from;
}

void sample_dealer::answered(std::uint32_t rank, std::uint64_t id, bool taken, std::int64_t from_clock) {
  if (rank >= ranks_.size() || !ranks_[rank].live || ranks_[rank].done) return;
  rank_state& s = ranks_[rank];
  if (s.shed && s.shed->first == id) {
    const std::int64_t keep = s.shed->second;
    s.shed.reset();
    if (!taken) return;
    // A lower keep may apply before dealt_until: the rows it gives up there are orphaned
    // now. A higher one applies at dealt_until or later (shed() asked for it).
    const kept_rows before = s.kept;
    orphan_rows(rank, from_clock, s.dealt_until, [&](std::int64_t c) {
      return std::pair<std::int64_t, std::int64_t>{keep, before.at(c)};
    });
    s.kept.set(from_clock, keep);
    return;
  }
  auto it = std::find_if(s.grants.begin(), s.grants.end(), [&](const auto& g) { return g.first.id == id; });
  if (it == s.grants.end()) return;
  if (taken) {
    it->second = true;
    return;
  }
  const rows_grant& g = it->first;
  orphan_grant_rows(g, 0, std::numeric_limits<std::int64_t>::max());
  for (std::int64_t step = g.from_step; step < d_.steps_per_epoch; ++step) {
    auto e = s.extra.find(g.epoch * d_.steps_per_epoch + step);
    if (e != s.extra.end()) e->second -= static_cast<std::int64_t>(grant_rows_at(g, d_.steps_per_epoch, step).size());
  }
  s.grants.erase(it);
}

std::optional<rows_shed> sample_dealer::shed(std::uint32_t rank, std::int64_t keep) {
  if (rank >= ranks_.size()) return std::nullopt;
  rank_state& s = ranks_[rank];
  keep = std::clamp<std::int64_t>(keep, 1, d_.batch);
  if (!s.live || s.done || s.shed || d_.max_extra_rows == 0) return std::nullopt;
  if (s.kept.last() == keep) return std::nullopt;
  // From its next step while every member is in its epoch, else from the first epoch no
  // member has begun, where every other member can take the rows (Note [Balancing
  // shares]); more rows than it keeps anywhere from its report on, also not before
  // dealt_until.
  std::int64_t fastest = s.clock;
  for (const rank_state& o : ranks_)
    if (o.live && !o.done) fastest = std::max(fastest, o.clock);
  const std::int64_t epoch = s.clock / d_.steps_per_epoch, fastest_epoch = fastest / d_.steps_per_epoch;
  std::int64_t not_before = fastest_epoch == epoch && others_can_take(rank, keep)
                                ? 0
                                : (fastest_epoch + 1) * d_.steps_per_epoch;
  if (keep > s.kept.least_from(s.clock)) not_before = std::max(not_before, s.dealt_until);
  if (not_before >= d_.total_steps) return std::nullopt;
  const std::uint64_t id = next_id_++;
  s.shed.emplace(id, keep);
  return rows_shed{id, keep, not_before};
}

// Whether the members that shed nothing have room, in this epoch, for the rows `rank`
// would give up from its next step to the epoch's end by keeping `keep`.
bool sample_dealer::others_can_take(std::uint32_t rank, std::int64_t keep) const {
  const rank_state& s = ranks_[rank];
  const std::int64_t end = std::min((s.clock / d_.steps_per_epoch + 1) * d_.steps_per_epoch, d_.total_steps);
  std::int64_t given_up = 0;
  std::vector<std::int64_t> rows;
  for (std::int64_t c = s.clock + 1; c < end; ++c) {
    rows.clear();
    static_positions(d_, rank, c, rows, keep, s.kept.at(c));
    given_up += static_cast<std::int64_t>(rows.size());
  }
  std::int64_t space = 0;
  for (std::uint32_t r = 0; r < ranks_.size() && space < given_up; ++r) {
    const rank_state& o = ranks_[r];
    if (r == rank || !o.live || o.done || sheds(o)) continue;
    const std::int64_t from = std::max(end - d_.steps_per_epoch, o.clock + lookahead);
    if (from < end) space += room(o, from, end);
  }
  return space >= given_up;
}

std::int64_t sample_dealer::keeps(std::uint32_t rank) const {
  return rank < ranks_.size() ? ranks_[rank].kept.last() : d_.batch;
}

bool sample_dealer::sheds(const rank_state& s) const {
  return s.shed.has_value() || s.kept.least_from(s.clock) < d_.batch;
}

std::int64_t sample_dealer::never_dealt() const {
  std::int64_t n = 0;
  for (const rank_state& s : ranks_) {
    if (s.done) continue;
    std::vector<std::int64_t> rows;
    for (std::int64_t c = s.dealt_until; c < d_.total_steps; ++c) {
      rows.clear();
      static_positions(d_, 0, c, rows, s.kept.at(c));
      n += static_cast<std::int64_t>(rows.size());
    }
  }
  return n;
}

void sample_dealer::advance(std::uint32_t rank, std::int64_t to) {
  rank_state& s = ranks_[rank];
  if (to <= s.dealt_until) return;
  if (s.kept.changed()) {
    const kept_rows& kept = s.kept;
    orphan_rows(rank, s.dealt_until, to, [&](std::int64_t c) {
      return std::pair<std::int64_t, std::int64_t>{kept.at(c), d_.batch};
    });
  }
  s.dealt_until = to;
}

void sample_dealer::orphan_rows(std::uint32_t rank, std::int64_t from, std::int64_t to,
                                const std::function<std::pair<std::int64_t, std::int64_t>(std::int64_t)>& rows) {
  for (std::int64_t c = std::max<std::int64_t>(0, from); c < std::min(to, d_.total_steps); ++c) {
    const auto [first, end] = rows(c);
    if (first < end) static_positions(d_, rank, c, orphans_[static_cast<std::int32_t>(c / d_.steps_per_epoch)], first, end);
  }
}

void sample_dealer::orphan_grant_rows(const rows_grant& g, std::int64_t from_clock, std::int64_t to_clock) {
  for (std::int64_t step = g.from_step; step < d_.steps_per_epoch; ++step) {
    const std::int64_t c = g.epoch * d_.steps_per_epoch + step;
    if (c < from_clock || c >= to_clock) continue;
    const auto rows = grant_rows_at(g, d_.steps_per_epoch, step);
    orphans_[g.epoch].insert(orphans_[g.epoch].end(), rows.begin(), rows.end());
    dealt_ -= static_cast<std::int64_t>(rows.size());  // no longer its holder's
  }
}

// Extra rows the member can still take, spread evenly, over the clocks [from, to).
std::int64_t sample_dealer::room(const rank_state& s, std::int64_t from, std::int64_t to) const {
  std::int64_t busiest = 0;
  for (auto it = s.extra.lower_bound(from); it != s.extra.end() && it->first < to; ++it)
    busiest = std::max(busiest, it->second);
  return std::max<std::int64_t>(0, d_.max_extra_rows - busiest) * (to - from);
}

std::vector<std::pair<std::uint32_t, rows_grant>> sample_dealer::deal() {
  std::vector<std::pair<std::uint32_t, rows_grant>> out;
  std::int64_t fastest = -1;
  for (const rank_state& s : ranks_)
    if (s.live && !s.done) fastest = std::max(fastest, s.clock);
  if (fastest >= 0) {
    // A vacant or shedding rank's next epoch, once the fastest member nears it; not while
    // a shed is unanswered (Note [Balancing shares]).
    for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
      rank_state& s = ranks_[r];
      if (s.done || s.shed || !s.kept.changed()) continue;
      while (s.dealt_until < d_.total_steps && fastest + lookahead >= s.dealt_until)
        advance(r, std::min((s.dealt_until / d_.steps_per_epoch + 1) * d_.steps_per_epoch, d_.total_steps));
    }
  }
  auto orphans = std::exchange(orphans_, {});
  for (auto& [epoch, positions] : orphans) deal_epoch(epoch, positions, out);
  return out;
}

void sample_dealer::deal_epoch(std::int32_t epoch, std::vector<std::int64_t>& positions,
                               std::vector<std::pair<std::uint32_t, rows_grant>>& out) {
  const std::int64_t total = static_cast<std::int64_t>(positions.size());
  if (total == 0) return;
  const std::int64_t begin = epoch * d_.steps_per_epoch, end = std::min(begin + d_.steps_per_epoch, d_.total_steps);
  struct taker {
    std::uint32_t rank;
    std::int64_t from, weight, room, share = 0;
  };
  std::vector<taker> takers;
  std::int64_t weights = 0;
  auto add_takers = [&](bool shedding) {
    for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
      const rank_state& s = ranks_[r];
      if (!s.live || s.done || sheds(s) != shedding) continue;
      const std::int64_t from = std::max(begin, s.clock + lookahead);
      if (from >= end) continue;
      const std::int64_t space = room(s, from, end);
      if (space <= 0) continue;
      takers.push_back({r, from, end - from, space});
      weights += end - from;
    }
  };
  add_takers(false);
  // In proportion to the steps each has left in the epoch, then what did not fit to those
  // with room left; what still does not fit goes to shedding members (their own given-up
  // rows among them): slowly trained rather than not at all.
  std::int64_t given = 0, cumulative = 0;
  for (taker& t : takers) {
    const std::int64_t before = weights ? total * cumulative / weights : 0;
    cumulative += t.weight;
    const std::int64_t after = weights ? total * cumulative / weights : 0;
    t.share = std::min(after - before, t.room);
    given += t.share;
  }
  add_takers(true);
  for (std::size_t i = 0; i < takers.size() && given < total; ++i) {
    taker& t = takers[i];
    const std::int64_t more = std::min(total - given, t.room - t.share);
    t.share += more;
    given += more;
  }
  lost_ += total - given;
  std::int64_t offset = 0;
  for (const taker& t : takers) {
    if (t.share == 0) continue;
    rows_grant g{next_id_++, epoch, t.from - begin,
                 std::vector<std::int64_t>(positions.begin() + offset, positions.begin() + offset + t.share)};
    offset += t.share;
    rank_state& s = ranks_[t.rank];
    for (std::int64_t step = g.from_step; step < end - begin; ++step)
      s.extra[begin + step] += static_cast<std::int64_t>(grant_rows_at(g, d_.steps_per_epoch, step).size());
    dealt_ += t.share;
    s.grants.emplace_back(g, false);
    out.emplace_back(t.rank, std::move(g));
  }
}

}  // namespace troupe
