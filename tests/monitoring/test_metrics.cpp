// Tests for monitoring/metrics.cpp: the families carry Troupe's names, types and labels
// (troupe_ prefix, _total counters, base units, troupe_job everywhere), handles update what
// a scrape shows, the exposer serves over HTTP, and a busy port is an error, not an abort.
#define BOOST_TEST_MODULE metrics
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <regex>
#include <thread>

#include "monitoring/metrics.hpp"
#include "tests/support/http.hpp"

using namespace troupe::monitoring;

BOOST_AUTO_TEST_CASE(families_have_conventional_names_types_and_labels) {
  registry r("job-1");
  auto w = r.worker(3);
  auto s = r.shard(1);
  auto c = r.coordinator();
  auto st = r.stage(0, 2);
  w.samples->Increment(128);
  w.step_seconds->Observe(0.01);
  s.staleness->Observe(2);
  s.rejected("not_finite")->Increment();
  c.nodes_up("worker")->Set(4);
  c.relative_step_rate(3)->Set(0.4);
  st.stored_activations->Set(3);
  c.pipeline_bubble("measured")->Set(0.25);
  const std::string text = r.scrape();
  BOOST_TEST(text.find("# TYPE troupe_samples_total counter") != std::string::npos);
  BOOST_TEST(text.find("troupe_samples_total{troupe_job=\"job-1\",rank=\"3\",role=\"worker\"} 128") != std::string::npos);
  BOOST_TEST(text.find("# TYPE troupe_step_seconds histogram") != std::string::npos);
  BOOST_TEST(text.find("troupe_staleness_bucket{troupe_job=\"job-1\",role=\"server\",shard=\"1\",le=\"2\"} 1") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_rejected_messages_total{troupe_job=\"job-1\",reason=\"not_finite\",role=\"server\"") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_worker_relative_step_rate{troupe_job=\"job-1\",rank=\"3\",role=\"coordinator\"} 0.4") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_pipeline_bubble_fraction{troupe_job=\"job-1\",kind=\"measured\",role=\"coordinator\"} 0.25") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_stage_stored_activations{troupe_job=\"job-1\",replica=\"0\",role=\"stage\",stage=\"2\"} 3") !=
             std::string::npos);
  for (const char* p : {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                        "process_open_fds", "process_max_fds", "process_start_time_seconds"})
    BOOST_TEST(text.find(std::string(p) + "{troupe_job=\"job-1\"} ") != std::string::npos, p);
  // Every sample line: troupe_ prefix (process_ for the standard process metrics), a
  // troupe_job label; counters end in _total.
  std::regex sample(R"(^((troupe|process)_[a-z_]+)\{troupe_job="job-1".*\} .+$)");
  std::regex type(R"(^# TYPE (\S+) (counter|gauge|histogram)$)");
  std::istringstream lines(text);
  int samples = 0;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, type) && m[2] == "counter") BOOST_TEST(m[1].str().ends_with("_total"), line);
    if (line.empty() || line[0] == '#') continue;
    BOOST_TEST(std::regex_match(line, sample), line);
    ++samples;
  }
  BOOST_TEST(samples > 50);
  // The same reason gives the same counter.
  BOOST_TEST(s.rejected("not_finite") == s.rejected("not_finite"));
}

BOOST_AUTO_TEST_CASE(serves_over_http_and_reports_a_busy_port) {
  registry r("job-2");
  r.worker(0).samples->Increment(7);
  auto port = r.serve("127.0.0.1", 0);
  BOOST_REQUIRE(port.has_value());
  auto body = troupe::test::http_get(*port, "/metrics");
  BOOST_REQUIRE(body.has_value());
  BOOST_TEST(body->find("troupe_samples_total{troupe_job=\"job-2\",rank=\"0\",role=\"worker\"} 7") != std::string::npos);
  registry other("job-3");
  auto busy = other.serve("127.0.0.1", *port);
  BOOST_REQUIRE(!busy.has_value());
  BOOST_TEST(busy.error().message.find(std::to_string(*port)) != std::string::npos);
  BOOST_TEST(busy.error().message.find("--metrics") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(device_allocator_figures_become_gauges_and_counters) {
  registry r("job-4");
  auto d = r.device(1, "cuda:0");
  d.record(4096, 1024, 3, 2);
  d.record(8192, 0, 10, 2);  // cumulative figures: the counters advance by the difference
  const std::string text = r.scrape();
  const std::string labels = "device=\"cuda:0\",rank=\"1\",role=\"worker\"";
  BOOST_TEST(text.find("troupe_device_memory_bytes{troupe_job=\"job-4\"," + labels + ",state=\"in_use\"} 8192") !=
             std::string::npos, text);
  BOOST_TEST(text.find("troupe_device_memory_bytes{troupe_job=\"job-4\"," + labels + ",state=\"cached\"} 0") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_device_allocations_total{troupe_job=\"job-4\"," + labels + ",source=\"cache\"} 10") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_device_allocations_total{troupe_job=\"job-4\"," + labels + ",source=\"device\"} 2") !=
             std::string::npos);
}

namespace {

double sample_value(const std::string& text, const std::string& series) {
  const auto at = text.find(series + " ");
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, series + " is not in the scrape");
  return std::stod(text.substr(at + series.size() + 1));
}

}  // namespace

BOOST_AUTO_TEST_CASE(build_info_and_job_state_are_exported) {
  registry r("job-6");
  std::string text = r.scrape();
  BOOST_TEST(std::regex_search(text, std::regex(R"re(troupe_build_info\{troupe_job="job-6",commit="(?:[0-9a-f]+|unknown)",version="[0-9.]+"\} 1)re")),
             text);
  BOOST_TEST(sample_value(text, "troupe_job_state{troupe_job=\"job-6\",state=\"running\"}") == 1);
  BOOST_TEST(sample_value(text, "troupe_job_state{troupe_job=\"job-6\",state=\"finished\"}") == 0);
  r.set_job_state(job_state::failed);
  text = r.scrape();
  BOOST_TEST(sample_value(text, "troupe_job_state{troupe_job=\"job-6\",state=\"running\"}") == 0);
  BOOST_TEST(sample_value(text, "troupe_job_state{troupe_job=\"job-6\",state=\"failed\"}") == 1);
}

// Note [Job state and linger]: a process nobody scraped ends at once; one that was scraped
// waits for the next scrape, which reads the final state, or for its limit.
BOOST_AUTO_TEST_CASE(linger_waits_for_one_scrape_of_the_final_state_only_when_watched) {
  using namespace std::chrono;
  registry r("job-7");
  auto port = r.serve("127.0.0.1", 0);
  BOOST_REQUIRE(port.has_value());
  auto t0 = steady_clock::now();
  r.linger(seconds(30));  // never scraped: nobody to wait for
  BOOST_TEST(duration_cast<seconds>(steady_clock::now() - t0).count() < 5);

  BOOST_REQUIRE(troupe::test::http_get(*port, "/metrics").has_value());
  BOOST_TEST(r.scrapes() == 1u);
  r.set_job_state(job_state::finished);
  auto scraper = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(milliseconds(300));
    return troupe::test::http_get(*port, "/metrics");
  });
  t0 = steady_clock::now();
  r.linger(seconds(30));
  const auto waited = steady_clock::now() - t0;
  BOOST_TEST(duration_cast<milliseconds>(waited).count() >= 250);
  BOOST_TEST(duration_cast<seconds>(waited).count() < 10);
  const auto last = scraper.get();
  BOOST_REQUIRE(last.has_value());
  BOOST_TEST(last->find("troupe_job_state{troupe_job=\"job-7\",state=\"finished\"} 1") != std::string::npos);

  t0 = steady_clock::now();
  r.linger(milliseconds(400));  // watched, but no scrape comes: the limit ends it
  const auto limited = duration_cast<milliseconds>(steady_clock::now() - t0).count();
  BOOST_TEST(limited >= 350);
  BOOST_TEST(limited < 5000);
}
