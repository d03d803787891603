// `troupe train --trace FILE` end to end: the file is Chrome trace-event JSON with a row
// per actor; on every worker row the spans nest (pull, forward, backward and push inside
// their step) and the steps cover the run; held pulls appear as balanced async spans; a
// pipeline gets a row per stage with a forward and a backward span per microbatch; in
// allreduce each worker row shows each step's reduce-scatter and all-gather.
#define BOOST_TEST_MODULE timeline
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "tests/support/process.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(spans_nest_and_cover_the_run) {
  const auto path = (fs::temp_directory_path() / ("troupe-timeline-" + std::to_string(::getpid()) + ".json")).string();
  auto r = run_process({troupe_bin(), "train", "--dataset", "synthetic", "--train-samples", "8000", "--epochs", "2",
                        "--mode", "ssp", "--staleness", "0", "--metrics", "off", "--trace", path},
                       120s);
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  std::map<int, std::string> rows;
  std::map<int, std::vector<nlohmann::json>> spans;
  std::map<std::uint64_t, int> async_balance;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") rows[e["tid"]] = e["args"]["name"];
    if (ph == "X") spans[e["tid"]].push_back(e);
    if (ph == "b") ++async_balance[e["id"]];
    if (ph == "e") --async_balance[e["id"]];
  }
  int worker_rows = 0;
  for (const auto& [tid, name] : rows) {
    if (name.rfind("worker", 0) != 0) continue;
    ++worker_rows;
    auto& v = spans[tid];
    BOOST_TEST_CONTEXT(name) {
      BOOST_REQUIRE(v.size() > 20u);
      std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
        return a["ts"] < b["ts"] || (a["ts"] == b["ts"] && a["dur"] > b["dur"]);
      });
      // Nesting: a stack of open spans; each new span must start inside the top and end
      // inside it, or after it (then the top is closed).
      std::vector<std::pair<std::int64_t, std::int64_t>> open;
      std::map<std::string, int> count;
      std::int64_t covered = 0, first = v.front()["ts"], last = 0;
      int partial_overlaps = 0, outside_step = 0;
      for (const auto& e : v) {
        const std::int64_t b = e["ts"], end = b + e["dur"].get<std::int64_t>();
        while (!open.empty() && open.back().second <= b) open.pop_back();
        if (!open.empty() && end > open.back().second) ++partial_overlaps;
        const std::string n = e["name"];
        ++count[n];
        if (n == "step") {
          covered += end - b;
          last = std::max(last, end);
        } else if (open.empty()) {
          ++outside_step;
        }
        open.emplace_back(b, end);
      }
      BOOST_TEST(partial_overlaps == 0);
      BOOST_TEST(outside_step == 0);
      for (const char* n : {"step", "pull", "forward", "backward", "push"}) BOOST_TEST(count[n] > 10, n);
      BOOST_TEST(count["forward"] == count["step"]);
      // The steps cover the worker's time from its first step to its last.
      BOOST_TEST(static_cast<double>(covered) / static_cast<double>(last - first) > 0.7);
    }
  }
  BOOST_TEST(worker_rows == 2);
  BOOST_TEST(rows.size() >= 4u);  // two workers, two shards
  for (const auto& [id, balance] : async_balance) BOOST_TEST(balance == 0);
  BOOST_TEST(!async_balance.empty());  // ssp with bound 0 holds pulls
  fs::remove(path);
}

// A pipeline's trace: one row per stage ("replica R stage S"), and on each row one forward
// and one backward span per microbatch per step, each naming its step and microbatch.
BOOST_AUTO_TEST_CASE(a_pipeline_has_a_row_per_stage_and_a_span_per_microbatch) {
  const auto path =
      (fs::temp_directory_path() / ("troupe-timeline-pipe-" + std::to_string(::getpid()) + ".json")).string();
  auto r = run_process({troupe_bin(), "train", "--dataset", "synthetic", "--train-samples", "1280", "--epochs", "1",
                        "--workers", "1", "--servers", "1", "--mode", "sync", "--pipeline-stages", "2",
                        "--microbatches", "4", "--metrics", "off", "--trace", path},
                       120s);
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  std::map<int, std::string> rows;
  std::map<std::string, std::map<std::string, std::set<std::pair<std::int64_t, std::int64_t>>>> seen;  // row, kind
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") rows[e["tid"]] = e["args"]["name"];
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X" || (e["name"] != "forward" && e["name"] != "backward")) continue;
    BOOST_REQUIRE(e.contains("args") && e["args"].contains("step") && e["args"].contains("microbatch"));
    seen[rows[e["tid"]]][e["name"]].insert({e["args"]["step"].get<std::int64_t>(), e["args"]["microbatch"].get<std::int64_t>()});
  }
  const std::int64_t steps = 1280 / 128;
  for (const char* row : {"replica 0 stage 0", "replica 0 stage 1"})
    for (const char* kind : {"forward", "backward"}) BOOST_TEST_CONTEXT(row << " " << kind) {
        const auto& s = seen[row][kind];
        BOOST_TEST(s.size() == static_cast<std::size_t>(steps * 4));
        BOOST_TEST((s.count({0, 3}) == 1 && s.count({steps - 1, 0}) == 1));
      }
  fs::remove(path);
}

// --mode allreduce: every worker row shows each step's reduce-scatter and then its
// all-gather, back to back, inside the step (Horovod's timeline shows the same phases).
BOOST_AUTO_TEST_CASE(allreduce_shows_each_steps_ring_phases) {
  const auto path =
      (fs::temp_directory_path() / ("troupe-timeline-ring-" + std::to_string(::getpid()) + ".json")).string();
  auto r = run_process({troupe_bin(), "train", "--dataset", "synthetic", "--train-samples", "2560", "--epochs", "1",
                        "--workers", "2", "--batch-size", "64", "--mode", "allreduce", "--metrics", "off", "--trace",
                        path},
                       120s);
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  std::map<int, std::string> rows;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") rows[e["tid"]] = e["args"]["name"];
  std::map<std::string, std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>>> spans;  // row, name
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") {
      const std::int64_t b = e["ts"];
      spans[rows[e["tid"]]][e["name"]].emplace_back(b, b + e["dur"].get<std::int64_t>());
    }
  const std::size_t steps = 2560 / 2 / 64;
  for (const char* row : {"worker 0", "worker 1"})
    BOOST_TEST_CONTEXT(row) {
      auto& s = spans[row];
      BOOST_REQUIRE_EQUAL(s["step"].size(), steps);
      BOOST_REQUIRE_EQUAL(s["reduce-scatter"].size(), steps);
      BOOST_REQUIRE_EQUAL(s["all-gather"].size(), steps);
      for (auto& [name, v] : s) std::sort(v.begin(), v.end());
      for (std::size_t i = 0; i < steps; ++i) {
        const auto step = s["step"][i], rs = s["reduce-scatter"][i], ag = s["all-gather"][i];
        BOOST_TEST((step.first <= rs.first && rs.second <= ag.first && ag.second <= step.second), "step " << i);
        BOOST_TEST(ag.first - rs.second <= 1, "step " << i);  // the all-gather begins as the reduce-scatter ends
      }
      BOOST_TEST(s["push"].empty());  // no shard servers
    }
  fs::remove(path);
}
