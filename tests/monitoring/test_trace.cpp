// Tests for monitoring/trace.cpp: Chrome trace-event JSON with named process and thread
// rows, complete and asynchronous spans, a ring buffer that keeps the newest events,
// and merging nodes' files.
#define BOOST_TEST_MODULE trace
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "monitoring/trace.hpp"

using namespace troupe::monitoring;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

nlohmann::json read(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::string temp(const std::string& name) {
  return (fs::temp_directory_path() / ("troupe-trace-" + std::to_string(::getpid()) + "-" + name)).string();
}

}  // namespace

BOOST_AUTO_TEST_CASE(writes_named_rows_and_spans) {
  trace_log t(100);
  const auto w = t.track("worker 0");
  const auto s = t.track("shard 0");
  const auto t0 = trace_log::time_point(1000000us);
  t.span(w, "step", t0, t0 + 10ms);
  t.span(w, "forward", t0 + 1ms, t0 + 4ms, 12, 3);
  t.async_span(s, "held pull", 7, t0, t0 + 3ms);
  const auto path = temp("a.json");
  BOOST_REQUIRE(t.write(path, "troupe train", 42).has_value());
  const auto doc = read(path);
  const auto& ev = doc["traceEvents"];
  int names = 0, complete = 0, async = 0;
  for (const auto& e : ev) {
    BOOST_TEST(e["pid"] == 42);
    if (e["ph"] == "M") ++names;
    if (e["ph"] == "X") {
      ++complete;
      if (e["name"] == "forward") {
        BOOST_TEST(e["ts"] == 1001000);
        BOOST_TEST(e["dur"] == 3000);
        BOOST_TEST(e["tid"] == w);
        BOOST_TEST(e["args"]["step"] == 12);
        BOOST_TEST(e["args"]["microbatch"] == 3);
      }
      if (e["name"] == "step") BOOST_TEST(!e.contains("args"));
    }
    if (e["ph"] == "b" || e["ph"] == "e") ++async;
  }
  BOOST_TEST(names == 3);  // the process and two tracks
  BOOST_TEST(complete == 2);
  BOOST_TEST(async == 2);
  fs::remove(path);
}

BOOST_AUTO_TEST_CASE(the_ring_keeps_the_newest_events) {
  trace_log t(16);
  const auto w = t.track("w");
  for (int i = 0; i < 40; ++i)
    t.span(w, "step", trace_log::time_point(std::chrono::microseconds(i * 10)),
           trace_log::time_point(std::chrono::microseconds(i * 10 + 5)));
  BOOST_TEST(t.recorded() == 16u);
  BOOST_TEST(t.dropped() == 24u);
  const auto path = temp("b.json");
  BOOST_REQUIRE(t.write(path, "p", 1).has_value());
  std::vector<std::int64_t> ts;
  const auto doc = read(path);
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") ts.push_back(e["ts"]);
  BOOST_REQUIRE(ts.size() == 16u);
  BOOST_TEST(ts.front() == 240);  // events 24..39, oldest first
  BOOST_TEST(ts.back() == 390);
  fs::remove(path);
}

BOOST_AUTO_TEST_CASE(merging_keeps_every_node) {
  trace_log a(8), b(8);
  a.span(a.track("worker 0"), "step", trace_log::time_point(10us), trace_log::time_point(20us));
  b.span(b.track("shard 0"), "apply", trace_log::time_point(12us), trace_log::time_point(14us));
  const auto pa = temp("n1.json"), pb = temp("n2.json"), out = temp("all.json");
  BOOST_REQUIRE(a.write(pa, "worker node", 1).has_value());
  BOOST_REQUIRE(b.write(pb, "server node", 2).has_value());
  BOOST_REQUIRE(merge_traces({pa, pb, temp("missing.json")}, out).has_value());
  std::set<int> pids;
  const auto merged = read(out);
  for (const auto& e : merged["traceEvents"]) pids.insert(e["pid"].get<int>());
  BOOST_TEST(pids == (std::set<int>{1, 2}));
  BOOST_TEST(!a.write("/nonexistent/dir/t.json", "x", 1).has_value());
  for (const auto& p : {pa, pb, out}) fs::remove(p);
}
