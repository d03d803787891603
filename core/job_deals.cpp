// job_core, part 6: dealing a lost worker's samples to the others (Note [Dealing a lost
// worker's samples] in core/sample_deal.hpp). The dealer is told every report, answer,
// loss, finish and replacement; after each, the grants it makes go to their members.
#include <map>
#include <string>

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

job_actions_list job_core::on_rows_answer(const rows_answer& a) {
  if (phase_ == job_phase::finished || !dealer_ || a.rank >= members_.size() || !members_[a.rank].live) return {};
  dealer_->answered(a.rank, a.id, a.taken);
  job_actions_list out;
  deal_rows(out);
  return out;
}

std::string job_core::redealt_account(const job_result& r) const {
  if (!dealer_ || workers_lost_ == 0) return workers_lost_ > 0 ? "the lost workers' shares of their epochs were not trained" : "";
  std::string s = std::to_string(r.samples_redealt) + " of the lost workers' samples went to the others";
  const std::int64_t lost = dealer_->lost_positions() + dealer_->never_dealt();
  if (lost > 0) s += "; " + std::to_string(lost) + " found no worker with steps left in their epoch";
  return s;
}

}  // namespace troupe
