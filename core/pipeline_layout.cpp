// Cutting a model into balanced stages and mapping stages onto shards.
#include "core/pipeline_layout.hpp"

#include <algorithm>
#include <limits>

#include "base/enum_names.hpp"
#include "train/layer_profile.hpp"

namespace troupe {

// stage_balance's names, for its parse and name_of.
constexpr std::array<enum_name<stage_balance>, 3> stage_balances{{
    {stage_balance::time, "time"},
    {stage_balance::flops, "flops"},
    {stage_balance::params, "params"},
}};

expected<stage_balance> parse_stage_balance(std::string_view name) { return parse_in(stage_balances, name, "balance"); }

std::string_view name_of(stage_balance x) { return name_in(stage_balances, x); }

expected<std::vector<double>> layer_costs(const model& m, stage_balance by, std::int64_t microbatch_rows) {
  const int n = m.num_layers();
  std::vector<double> cost(n, 0.0);
  switch (by) {
    case stage_balance::flops:
      for (int i = 0; i < n; ++i) cost[i] = m.layer_at(i).forward_flops_per_sample();
      break;
    case stage_balance::params:
      for (const auto& b : m.blocks()) cost[b.layer] += static_cast<double>(b.numel);
      break;
    case stage_balance::time: {
      profile_options o;
      o.rows = microbatch_rows;
      auto t = profile_layers(m, o);
      if (!t) return t.error();
      for (int i = 0; i < n; ++i) cost[i] = (*t)[i].total_s();
      break;
    }
  }
  return cost;
}

expected<std::vector<int>> cuts_by_cost(const std::vector<double>& cost, int stages, const std::string& model_name) {
  const int n = static_cast<int>(cost.size());
  if (stages < 1) return failure{"a pipeline needs at least one stage"};
  if (stages > n)
    return failure{"model '" + model_name + "' has " + std::to_string(n) + " layers, too few for " +
                   std::to_string(stages) + " pipeline stages"};
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  // best[k][j]: the smallest largest-stage cost splitting layers [0, j) into k stages;
  // from[k][j]: where the last of those stages starts. Ties keep the earliest start, so
  // the same costs always give the same cuts.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0.0;
  for (int k = 1; k <= stages; ++k)
    for (int j = k; j <= n; ++j)
      for (int i = k - 1; i < j; ++i) {
        const double c = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (c < best[k][j]) {
          best[k][j] = c;
          from[k][j] = i;
        }
      }
  std::vector<int> cuts;
  for (int k = stages, j = n; k > 1; --k) {
    j = from[k][j];
    cuts.push_back(j);
  }
  std::reverse(cuts.begin(), cuts.end());
  return cuts;
}

expected<std::vector<int>> balanced_cuts(const model& m, int stages, stage_balance by) {
  if (by == stage_balance::time) return failure{"balancing by time needs a profile of the layers (layer_costs)"};
  auto cost = layer_costs(m, by, 1);
  if (!cost) return cost.error();
  return cuts_by_cost(*cost, stages, m.name());
}

std::vector<double> stage_costs(const std::vector<double>& cost, const std::vector<int>& cuts) {
  std::vector<double> out(cuts.size() + 1, 0.0);
  std::size_t s = 0;
  for (std::size_t i = 0; i < cost.size(); ++i) {
    while (s < cuts.size() && static_cast<int>(i) >= cuts[s]) ++s;
    out[s] += cost[i];
  }
  return out;
}

std::vector<stage_span> stage_spans(const model& m, const std::vector<int>& cuts) {
  std::vector<int> bounds{0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(m.num_layers());
  std::vector<stage_span> out;
  std::int64_t offset = 0;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    stage_span span{bounds[s], bounds[s + 1], offset, 0};
    for (const auto& b : m.blocks())
      if (b.layer >= span.first_layer && b.layer < span.last_layer) span.numel += b.numel;
    offset += span.numel;
    out.push_back(span);
  }
  return out;
}

std::vector<key_range> stage_ranges(const std::vector<key_range>& shard_ranges, const stage_span& stage) {
  std::vector<key_range> out;
  for (key_range r : shard_ranges)
    if (r.offset >= stage.param_offset && r.offset < stage.param_offset + stage.numel) {
      r.offset -= stage.param_offset;
      out.push_back(r);
    }
  return out;
}

std::vector<shard_slice> shard_stage_slices(const std::vector<key_range>& shard_ranges,
                                            const std::vector<stage_span>& stages) {
  std::vector<shard_slice> out(stages.size());
  std::int64_t pos = 0;
  for (const auto& r : shard_ranges) {
    for (std::size_t s = 0; s < stages.size(); ++s) {
      if (r.offset < stages[s].param_offset || r.offset >= stages[s].param_offset + stages[s].numel) continue;
      auto& slice = out[s];
      if (!slice.empty() && slice.back().first + slice.back().second == pos)
        slice.back().second += r.length;
      else
        slice.emplace_back(pos, r.length);
    }
    pos += r.length;
  }
  return out;
}

}  // namespace troupe
