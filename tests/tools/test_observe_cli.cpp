// Tests for tools/observe_cli.cpp: --metrics and --trace checked before a job starts (an
// unwritable trace or a bad or busy address is an error that names the flag, and the check
// leaves no file behind); "auto" falls back to any free port when its default is busy, an
// explicit address never does; and at the end the trace is written and the registry's
// job state says how the process ended.
#define BOOST_TEST_MODULE observe_cli
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"
#include "tools/observe_cli.hpp"

using namespace troupe;
using namespace troupe::cli;
namespace fs = std::filesystem;

namespace {

bool mentions(const std::string& text, const std::string& word) { return text.find(word) != std::string::npos; }

// The options after parsing `args` (without the program name), or the parse error.
struct parsed {
  observe_options o;
  std::string error;
};
parsed parse(std::vector<std::string> args) {
  parsed p;
  CLI::App app("observe");
  add_observe_options(app, p.o);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    p.error = e.what();
  }
  return p;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

observe_options quiet() {
  observe_options o;
  o.metrics = "off";
  o.metrics_linger_s = 0;
  return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_flags_default_to_automatic_metrics_and_no_trace) {
  auto p = parse({});
  BOOST_REQUIRE(p.error.empty());
  BOOST_TEST(p.o.metrics == "auto");
  BOOST_TEST(p.o.trace.empty());
  BOOST_TEST(p.o.metrics_flag != nullptr);
  BOOST_TEST(p.o.metrics_flag->count() == 0u);
  auto q = parse({"--metrics", "0.0.0.0:9400", "--trace", "t.json", "--trace-events", "64", "--metrics-linger", "2"});
  BOOST_REQUIRE(q.error.empty());
  BOOST_TEST(q.o.metrics == "0.0.0.0:9400");
  BOOST_TEST(q.o.trace == "t.json");
  BOOST_TEST(q.o.trace_events == 64u);
  BOOST_TEST(q.o.metrics_linger_s == 2.0);
  BOOST_TEST(q.o.metrics_flag->count() == 1u);
}

BOOST_AUTO_TEST_CASE(out_of_range_values_are_parse_errors) {
  BOOST_TEST(!parse({"--trace-events", "8"}).error.empty());
  BOOST_TEST(!parse({"--metrics-linger", "-1"}).error.empty());
  BOOST_TEST(!parse({"--metrics-linger", "4000"}).error.empty());
}

BOOST_AUTO_TEST_CASE(a_writable_trace_path_passes_and_the_check_leaves_nothing) {
  test::temp_dir dir("observe-writable");
  const std::string fresh = dir.file("trace.json");
  BOOST_TEST(!trace_unwritable(fresh).has_value());
  BOOST_TEST(!fs::exists(fresh));
  const std::string kept = dir.write("old.json", "earlier");
  BOOST_TEST(!trace_unwritable(kept).has_value());
  BOOST_TEST(slurp(kept) == "earlier");
}

BOOST_AUTO_TEST_CASE(an_unwritable_trace_path_is_refused_before_anything_starts) {
  test::temp_dir dir("observe-unwritable");
  const std::string path = dir.file("missing/trace.json");
  auto why = trace_unwritable(path);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(mentions(*why, "--trace: cannot write " + path));
  BOOST_TEST(mentions(*why, "writable directory"));
  observe_options o = quiet();
  o.trace = path;
  auto started = start_observability(o, "job-t", "127.0.0.1:0");
  BOOST_REQUIRE(!started);
  BOOST_TEST(mentions(started.error().message, "--trace"));
}

BOOST_AUTO_TEST_CASE(metrics_off_starts_no_registry) {
  auto started = start_observability(quiet(), "job-off", "127.0.0.1:0");
  BOOST_REQUIRE(started.has_value());
  BOOST_TEST(!started->metrics);
  BOOST_TEST(!started->trace);
}

BOOST_AUTO_TEST_CASE(a_malformed_metrics_address_names_the_flag) {
  observe_options o = quiet();
  o.metrics = "no-port-here";
  auto started = start_observability(o, "job-bad", "127.0.0.1:0");
  BOOST_REQUIRE(!started);
  BOOST_TEST(mentions(started.error().message, "--metrics"));
}

BOOST_AUTO_TEST_CASE(auto_moves_off_a_busy_default_but_an_explicit_address_does_not) {
  monitoring::registry holder("job-holder");
  auto busy = holder.serve("127.0.0.1", 0);
  BOOST_REQUIRE(busy.has_value());
  const std::string taken = "127.0.0.1:" + std::to_string(*busy);

  observe_options automatic = quiet();
  automatic.metrics = "auto";
  auto moved = start_observability(automatic, "job-auto", taken);
  BOOST_REQUIRE(moved.has_value());
  BOOST_REQUIRE(moved->metrics);
  BOOST_TEST(moved->metrics->port() != *busy);
  BOOST_TEST(moved->metrics->port() != 0);

  observe_options explicit_address = quiet();
  explicit_address.metrics = taken;
  auto refused = start_observability(explicit_address, "job-explicit", "127.0.0.1:0");
  BOOST_REQUIRE(!refused);
  BOOST_TEST(mentions(refused.error().message, std::to_string(*busy)));
}

BOOST_AUTO_TEST_CASE(the_end_writes_the_trace_and_sets_the_job_state) {
  test::temp_dir dir("observe-finish");
  observe_options o = quiet();
  o.metrics = "127.0.0.1:0";
  o.trace = dir.file("trace.json");
  o.trace_events = 16;
  auto obs = start_observability(o, "job-end", "127.0.0.1:0");
  BOOST_REQUIRE(obs.has_value());
  BOOST_REQUIRE(obs->trace);
  BOOST_REQUIRE(obs->metrics);
  const auto t = obs->trace->track("worker 0");
  const auto now = monitoring::trace_log::time_point::clock::now();
  obs->trace->span(t, "step", now, now + std::chrono::milliseconds(1), 7);
  BOOST_TEST(finish_observability(*obs, o, "worker", true));
  const std::string written = slurp(o.trace);
  BOOST_TEST(mentions(written, "traceEvents"));
  BOOST_TEST(mentions(written, "\"step\""));
  BOOST_TEST(mentions(obs->metrics->scrape(), "troupe_job_state{troupe_job=\"job-end\",state=\"finished\"} 1"));
}

BOOST_AUTO_TEST_CASE(a_trace_that_cannot_be_written_at_the_end_fails_the_process) {
  test::temp_dir dir("observe-lost");
  fs::create_directories(dir.path / "gone");
  observe_options o = quiet();
  o.metrics = "127.0.0.1:0";
  o.trace = (dir.path / "gone" / "trace.json").string();
  auto obs = start_observability(o, "job-lost", "127.0.0.1:0");
  BOOST_REQUIRE(obs.has_value());
  fs::remove_all(dir.path / "gone");
  BOOST_TEST(!finish_observability(*obs, o, "worker", true));
  BOOST_TEST(mentions(obs->metrics->scrape(), "troupe_job_state{troupe_job=\"job-lost\",state=\"failed\"} 1"));
}
