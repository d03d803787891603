// job_core, part 6: dealing a lost worker's samples and a slow worker's shed rows to the
// others (Note [Dealing a lost worker's samples], Note [Balancing shares] in
// core/sample_deal.hpp). The dealer is told every report, answer, loss, finish and
// replacement; after each, the sheds and grants it makes go to their members.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/job_core.hpp"

namespace troupe {

using namespace job_actions;

void job_core::deal_rows(job_actions_list& out) {
  if (!dealer_ || phase_ == job_phase::finished) return;
  for (auto& [rank, grant] : dealer_->deal()) out.push_back(grant_rows{rank, std::move(grant)});
}

void job_core::deal_lost_rows(std::uint32_t rank, job_actions_list& out) {
  if (!dealer_) return;
  const std::int64_t lost_before = dealer_->lost_positions();
  const std::size_t first = out.size();
  deal_rows(out);
  std::map<std::int32_t, std::int64_t> by_epoch;
  std::int64_t rows = 0;
  std::string to;
  for (std::size_t i = first; i < out.size(); ++i) {
    const auto& g = std::get<grant_rows>(out[i]);
    by_epoch[g.grant.epoch] += static_cast<std::int64_t>(g.grant.positions.size());
    rows += static_cast<std::int64_t>(g.grant.positions.size());
    to += (to.empty() ? "" : ", ") + std::to_string(g.rank);
  }
  const std::int64_t lost = dealer_->lost_positions() - lost_before;
  if (rows == 0 && lost == 0) return;
  std::string text = member_name(rank) + "'s untrained samples";
  if (rows > 0) {
    text += ": " + std::to_string(rows) + " of epoch";
    std::string epochs;
    for (const auto& [e, n] : by_epoch) epochs += (epochs.empty() ? " " : ", ") + std::to_string(e + 1);
    text += (by_epoch.size() > 1 ? "s" : "") + epochs + " go to workers " + to;
  }
  if (lost > 0)
    text += std::string(rows > 0 ? "; " : ": ") + std::to_string(lost) +
            " fit no other worker's steps left in their epoch and are not trained";
  out.push_back(note{text});
}

// Note [Balancing shares]: who sheds how much. Each member's rows per second of compute
// (its step's samples over its busy seconds: its own slowness, none of the waiting) are
// smoothed over about twenty steps (an exponential average, weight 0.05 for the newest)
// and compared, once it has reported min_balance_steps steps, with the upper median over
// the members that have (with two members, the fast one). A member below half of it keeps
// that fraction of its batch (at least an eighth), so its steps take about as long as the
// others'; it adjusts while below 0.75 and keeps all of its rows again above that. The
// MLP's 8 workers as threads on two cores, nobody slow, shed 16 times a run (13% fewer
// samples/s) with a weight of 0.2 and a threshold of 0.8: a member must be clearly and
// lastingly slow before rows move.
// A slow member is named only after those steps, so by then it is behind: at a quarter of
// the pace, 20 of its steps are 80 of the others'. Keeping rows in proportion to its rate
// would only hold that lag, and the job would end when it ends, the lag later than the
// others. So a slow member behind the others' (upper) median clock keeps fewer still, in
// the proportion of the job's steps they have left to those it has (at least half of
// what its rate says), and catches up before the job's end.
// A change of a fifth or less of what it keeps is not worth a message, but the one that
// ends a catch-up always is: else a member of 32 that kept 7 while behind kept 7 for good
// where its pace asks 8.
double job_core::catch_up(std::uint32_t rank) const {
  std::vector<std::int64_t> clocks;
  for (std::uint32_t w = 0; w < members_.size(); ++w)
    if (w != rank && members_[w].live && !members_[w].done) clocks.push_back(members_[w].clock);
  if (clocks.empty()) return 1.0;
  std::sort(clocks.begin(), clocks.end());
  const std::int64_t total = dealer_->shape().total_steps, theirs = clocks[clocks.size() / 2];
  const std::int64_t own = members_[rank].clock;
  if (own >= theirs || own >= total) return 1.0;
  return std::max(0.5, static_cast<double>(total - theirs) / static_cast<double>(total - own));
}

void job_core::balance_shares(const step_report& r, job_actions_list& out) {
  if (!balances_shares(job_) || phase_ != job_phase::training || r.samples <= 0 || r.busy_seconds <= 0.0) return;
  member& m = members_[r.rank];
  const double rate = static_cast<double>(r.samples) / r.busy_seconds;
  m.row_rate = m.rate_steps == 0 ? rate : 0.95 * m.row_rate + 0.05 * rate;
  if (++m.rate_steps < min_balance_steps) return;
  std::vector<double> rates;
  for (const member& w : members_)
    if (w.live && !w.done && w.rate_steps >= min_balance_steps) rates.push_back(w.row_rate);
  if (rates.size() < 2) return;
  std::sort(rates.begin(), rates.end());
  const double ratio = m.row_rate / rates[rates.size() / 2];
  const std::int64_t batch = job_.train.batch_size, now = dealer_->keeps(r.rank);
  const bool slow = now < batch ? ratio < 0.75 : ratio < 0.5;
  const double lag = slow ? catch_up(r.rank) : 1.0;
  const std::int64_t want = !slow ? batch
                                  : std::clamp<std::int64_t>(std::llround(static_cast<double>(batch) * ratio * lag),
                                                             std::max<std::int64_t>(1, batch / 8), batch);
  const bool ends_catch_up = m.catching_up && lag >= 1.0;
  if (want == now && lag >= 1.0) m.catching_up = false;
  if (want == now ||
      (!ends_catch_up && want != batch && std::abs(want - now) <= std::max<std::int64_t>(1, now / 5)))
    return;
  auto shed = dealer_->shed(r.rank, want);
  if (!shed) return;
  m.catching_up = lag < 1.0;
  out.push_back(shed_rows{r.rank, *shed});
  if ((now == batch) == (want == batch)) return;
  char times[32];
  std::snprintf(times, sizeof times, "%.2f", ratio);
  out.push_back(note{want == batch ? member_name(r.rank) + " keeps pace again (" + times +
                                         "x the median rows per second): it trains all its samples again"
                                   : member_name(r.rank) + " computes " + times + "x the median rows per second: it " +
                                         "trains " + std::to_string(want) + " of its " + std::to_string(batch) +
                                         " samples a step and the others the rest" +
                                         (lag < 1.0 ? ", fewer than its pace alone asks while it catches up" : "") +
                                         " (--share-balance)"});
}

job_actions_list job_core::on_rows_answer(const rows_answer& a) {
  if (phase_ == job_phase::finished || !dealer_ || a.rank >= members_.size() || !members_[a.rank].live) return {};
  dealer_->answered(a.rank, a.id, a.taken, a.from_clock);
  job_actions_list out;
  deal_rows(out);
  return out;
}

std::string job_core::redealt_account(const job_result& r) const {
  if (!dealer_) return workers_lost_ > 0 ? "the lost workers' shares of their epochs were not trained" : "";
  const std::int64_t untrained = dealer_->lost_positions() + dealer_->never_dealt();
  if (r.samples_redealt == 0 && untrained == 0) return "";
  std::string s = std::to_string(r.samples_redealt) + " samples of lost or slow workers went to the others";
  if (untrained > 0) s += "; " + std::to_string(untrained) + " found no worker with steps left in their epoch";
  return s;
}

}  // namespace troupe
