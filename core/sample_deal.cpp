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
  d.max_extra_rows = deals_samples(job) ? d.batch : 0;
  return d;
}

bool deals_samples(const job_spec& job) {
  return job.pipeline_stages == 1 && job.servers > 0 && !job.local_reduce && !job.kv && job.workers > 1;
}

void static_positions(const deal_shape& d, std::uint32_t rank, std::int64_t clock, std::vector<std::int64_t>& out) {
  const std::int64_t s = clock % d.steps_per_epoch;
  const std::int64_t rows = std::min(d.batch, d.samples_per_worker - s * d.batch);
  for (std::int64_t j = 0; j < rows; ++j) out.push_back((s * d.batch + j) * d.workers + rank);
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
  for (rank_state& s : ranks_) s.clock = s.dealt_until = start_clock;
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
  s.done = true;
  // Its answers came before its last report: a grant it did not answer, it never took.
  for (const auto& [g, taken] : s.grants)
    if (!taken) orphan_grant_rows(g, 0, std::numeric_limits<std::int64_t>::max());
  s.grants.clear();
  s.extra.clear();
}

void sample_dealer::lost(std::uint32_t rank) {
  if (rank >= ranks_.size() || !ranks_[rank].live || ranks_[rank].done) return;
  rank_state& s = ranks_[rank];
  s.live = false;
  const std::int64_t epoch_end = std::min((s.clock / d_.steps_per_epoch + 1) * d_.steps_per_epoch, d_.total_steps);
  orphan_static(rank, s.clock, epoch_end);
  s.dealt_until = std::max(s.clock, epoch_end);
  for (const auto& [g, taken] : s.grants) orphan_grant_rows(g, taken ? s.clock : 0, std::numeric_limits<std::int64_t>::max());
  s.grants.clear();
  s.extra.clear();
}

std::int64_t sample_dealer::replace(std::uint32_t rank, std::int64_t clock) {
  if (rank >= ranks_.size()) return clock;
  rank_state& s = ranks_[rank];
  if (s.live) return clock;
  const std::int64_t from = std::max(clock, s.dealt_until);
  orphan_static(rank, s.dealt_until, from);
  s = rank_state{};
  s.clock = s.dealt_until = from;
  return from;
}

void sample_dealer::answered(std::uint32_t rank, std::uint64_t id, bool taken) {
  if (rank >= ranks_.size() || !ranks_[rank].live || ranks_[rank].done) return;
  rank_state& s = ranks_[rank];
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

std::int64_t sample_dealer::never_dealt() const {
  std::int64_t n = 0;
  for (const rank_state& s : ranks_) {
    if (s.live) continue;
    for (std::int64_t c = s.dealt_until; c < d_.total_steps; ++c) {
      const std::int64_t step = c % d_.steps_per_epoch;
      n += std::max<std::int64_t>(0, std::min(d_.batch, d_.samples_per_worker - step * d_.batch));
    }
  }
  return n;
}

void sample_dealer::orphan_static(std::uint32_t rank, std::int64_t from, std::int64_t to) {
  for (std::int64_t c = from; c < std::min(to, d_.total_steps); ++c)
    static_positions(d_, rank, c, orphans_[static_cast<std::int32_t>(c / d_.steps_per_epoch)]);
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
    // A vacant rank's next epoch, once the fastest member nears it.
    for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
      rank_state& s = ranks_[r];
      while (!s.live && s.dealt_until < d_.total_steps && fastest + lookahead >= s.dealt_until) {
        const std::int64_t next = std::min((s.dealt_until / d_.steps_per_epoch + 1) * d_.steps_per_epoch, d_.total_steps);
        orphan_static(r, s.dealt_until, next);
        s.dealt_until = next;
      }
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
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    const rank_state& s = ranks_[r];
    if (!s.live || s.done) continue;
    const std::int64_t from = std::max(begin, s.clock + lookahead);
    if (from >= end) continue;
    const std::int64_t space = room(s, from, end);
    if (space <= 0) continue;
    takers.push_back({r, from, end - from, space});
    weights += end - from;
  }
  // In proportion to the steps each has left in the epoch, then what did not fit to those
  // with room left.
  std::int64_t given = 0, cumulative = 0;
  for (taker& t : takers) {
    const std::int64_t before = weights ? total * cumulative / weights : 0;
    cumulative += t.weight;
    const std::int64_t after = weights ? total * cumulative / weights : 0;
    t.share = std::min(after - before, t.room);
    given += t.share;
  }
  for (taker& t : takers) {
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
