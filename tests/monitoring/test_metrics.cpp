// Tests for monitoring/metrics.cpp: the families carry Troupe's names, types and labels
// (troupe_ prefix, _total counters, base units, troupe_job everywhere), handles update what
// a scrape shows, the exposer serves over HTTP, and a busy port is an error, not an abort.
#define BOOST_TEST_MODULE metrics
#include <boost/test/unit_test.hpp>

#include <regex>

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
  BOOST_TEST(text.find("troupe_worker_relative_step_rate{troupe_job=\"job-1\",role=\"coordinator\",worker_rank=\"3\"} 0.4") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_pipeline_bubble_fraction{troupe_job=\"job-1\",kind=\"measured\",role=\"coordinator\"} 0.25") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_stage_stored_activations{troupe_job=\"job-1\",replica=\"0\",role=\"stage\",stage=\"2\"} 3") !=
             std::string::npos);
  BOOST_TEST(text.find("troupe_process_resident_memory_bytes{troupe_job=\"job-1\"}") != std::string::npos);
  // Every sample line: troupe_ prefix, a troupe_job label; counters end in _total.
  std::regex sample(R"(^(troupe_[a-z_]+)\{troupe_job="job-1".*\} .+$)");
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
