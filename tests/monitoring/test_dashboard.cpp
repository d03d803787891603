// The dashboard against the real thing: a live `troupe train` job (data parallel, one
// process) and a `troupe launch --local` job (two replicas of a two-stage pipeline, a
// process per stage) serve metrics, the real Prometheus server (Debian's `prometheus`)
// scrapes them every second, and every PromQL expression in
// monitoring/grafana/troupe-dashboard.json is evaluated through Prometheus's HTTP API. A
// query that errors or returns no data fails the test (one that only a run resumed after a
// lost node has data for must not error); the pipeline row is checked against the
// pipeline job. Then the alerts against the same server: a job that finishes
// is not a dead node, a killed one is.
#define BOOST_TEST_MODULE dashboard
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/support/background.hpp"
#include "tests/support/http.hpp"
#include "tests/support/process.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string source_dir() {
  const char* p = std::getenv("TROUPE_SOURCE_DIR");
  BOOST_REQUIRE_MESSAGE(p, "TROUPE_SOURCE_DIR is not set; run through ctest");
  return p;
}

// Runs `query` now; returns the number of series, or -1 with `why` on an error.
int query(int port, const std::string& q, std::string& why) {
  auto body = http_get(port, "/api/v1/query?query=" + url_encode(q));
  if (!body) {
    why = "no answer from Prometheus";
    return -1;
  }
  const auto j = nlohmann::json::parse(*body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") {
    why = *body;
    return -1;
  }
  return static_cast<int>(j["data"]["result"].size());
}

// Every target expression of every panel, with Grafana's variables filled in.
std::vector<std::pair<std::string, std::string>> dashboard_queries() {
  std::ifstream in(source_dir() + "/monitoring/grafana/troupe-dashboard.json");
  const auto dash = nlohmann::json::parse(in);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& panel : dash["panels"]) {
    if (!panel.contains("targets")) continue;
    for (const auto& t : panel["targets"]) {
      std::string e = t["expr"];
      e = std::regex_replace(e, std::regex(R"(\$__rate_interval)"), "10s");
      e = std::regex_replace(e, std::regex(R"(\$job)"), ".*");
      e = std::regex_replace(e, std::regex(R"(\$role)"), ".*");
      out.emplace_back(panel["title"].get<std::string>(), e);
    }
  }
  return out;
}

// Waits for Prometheus at `prom` to hold several scrapes (and, for a pipeline job, a
// closed epoch's bubble), then checks every dashboard query (the pipeline row only for a
// pipeline job).
void check_dashboard(int prom, background_process& job, background_process& prometheus, bool pipeline) {
  std::string why;
  bool ready = false;
  for (int i = 0; i < 900 && !ready; ++i) {
    std::this_thread::sleep_for(100ms);
    ready = query(prom, "count_over_time(troupe_samples_total[1m]) > 8", why) > 0 &&
            (!pipeline || query(prom, "troupe_pipeline_bubble_fraction", why) > 0);
  }
  BOOST_REQUIRE_MESSAGE(ready, "Prometheus never collected the job's metrics; job stderr: " << job.err()
                                                                                          << "\nprometheus: " << prometheus.err());
  BOOST_REQUIRE(job.running());
  int checked = 0;
  for (const auto& [title, q] : dashboard_queries()) {
    const bool pipeline_query =
        q.find("troupe_stage_") != std::string::npos || q.find("troupe_pipeline_") != std::string::npos;
    if (pipeline_query && !pipeline) continue;
    // Exported only by a run resumed after a lost node (Note [Steps replayed]): it must
    // not error, and has no data here.
    const bool after_a_loss = q.find("troupe_steps_replayed") != std::string::npos;
    const int n = query(prom, q, why);
    BOOST_TEST_CONTEXT(title << ": " << q) {
      BOOST_TEST(n >= 0, why);
      if (!after_a_loss) BOOST_TEST(n > 0, "no data");
    }
    ++checked;
  }
  BOOST_TEST_MESSAGE(checked << " dashboard queries returned data");
  BOOST_TEST(checked > 30);
}

// Prometheus on a port the kernel picks; returns the process and that port.
std::pair<std::unique_ptr<background_process>, int> start_prometheus(const fs::path& dir, const fs::path& config) {
  auto p = std::make_unique<background_process>(
      std::vector<std::string>{"prometheus", "--config.file=" + config.string(),
                               "--storage.tsdb.path=" + (dir / "data").string(), "--web.listen-address=127.0.0.1:0"},
      (dir / "prometheus").string());
  const auto port = p->wait_for_port("msg=\"Listening on\" address=", 60s);
  BOOST_REQUIRE_MESSAGE(port.has_value(), "Prometheus did not start: " << p->err());
  return {std::move(p), *port};
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_dashboard_query_returns_data_from_a_live_job) {
  const fs::path dir = fs::temp_directory_path() / ("troupe-dash-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  background_process job({troupe_bin(), "train", "--dataset", "synthetic", "--simulate-compute", "3", "--epochs", "40",
                          "--mode", "ssp", "--metrics", "127.0.0.1:0"},
                         (dir / "job").string());
  const auto metrics = job.wait_for_port("metrics on http://", 60s);
  BOOST_REQUIRE_MESSAGE(metrics.has_value(), "the job did not serve metrics: " << job.err());
  std::ofstream(dir / "prometheus.yml") << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                                        << "scrape_configs:\n  - job_name: troupe\n    static_configs:\n"
                                        << "      - targets: ['127.0.0.1:" << *metrics << "']\n";
  auto [prometheus, prom] = start_prometheus(dir, dir / "prometheus.yml");
  check_dashboard(prom, job, *prometheus, false);
  job.signal(SIGTERM);
  prometheus->signal(SIGTERM);
  prometheus->wait(10s);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(every_dashboard_query_returns_data_from_a_launched_job) {
  const fs::path dir = fs::temp_directory_path() / ("troupe-dash-launch-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto config = dir / "prometheus.yml";
  background_process job({troupe_bin(), "launch", "--local", "--dataset", "synthetic", "--simulate-compute", "3",
                          "--epochs", "40", "--mode", "ssp", "--replicas", "2", "--pipeline-stages", "2",
                          "--microbatches", "4", "--prometheus-config", config.string()},
                         (dir / "job").string());
  for (int i = 0; i < 300 && !fs::exists(config); ++i) std::this_thread::sleep_for(100ms);
  BOOST_REQUIRE_MESSAGE(fs::exists(config), job.err());
  std::this_thread::sleep_for(200ms);
  // Scrape every second instead of the written 5 s, so the test waits less.
  std::string yml;
  {
    std::ifstream in(config);
    std::stringstream ss;
    ss << in.rdbuf();
    yml = std::regex_replace(ss.str(), std::regex("5s"), "1s");
  }
  BOOST_TEST(yml.find("node: 'worker-3'") != std::string::npos);  // 2 replicas x 2 stages
  std::ofstream(dir / "fast.yml") << yml;
  auto [prometheus, prom] = start_prometheus(dir, dir / "fast.yml");
  check_dashboard(prom, job, *prometheus, true);
  job.signal(SIGTERM);
  job.wait(30s);
  prometheus->signal(SIGTERM);
  prometheus->wait(10s);
  fs::remove_all(dir);
}

// The alerts named in Prometheus's /api/v1/alerts (pending or firing) for `instance`.
std::vector<std::string> alerts_for(int prom, const std::string& instance) {
  std::vector<std::string> out;
  auto body = http_get(prom, "/api/v1/alerts");
  if (!body) return out;
  const auto j = nlohmann::json::parse(*body, nullptr, false);
  if (j.is_discarded()) return out;
  for (const auto& a : j["data"]["alerts"])
    if (a["labels"].value("instance", "") == instance) out.push_back(a["labels"].value("alertname", ""));
  return out;
}

// Note [Job state and linger] end to end, with the shipped alerts.yml loaded: a job that
// finishes lingers until Prometheus has read troupe_job_state finished, and
// TroupeNodeDown never even becomes pending for it; a job killed mid-run makes it pending
// within seconds.
BOOST_AUTO_TEST_CASE(a_finished_job_is_not_a_dead_node_and_a_killed_one_is) {
  const fs::path dir = fs::temp_directory_path() / ("troupe-alerts-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto train = [&](const std::string& id, const std::string& epochs) {
    return std::make_unique<background_process>(
        std::vector<std::string>{troupe_bin(), "train", "--dataset", "synthetic", "--simulate-compute", "3", "--epochs",
                                 epochs, "--metrics", "127.0.0.1:0", "--job-id", id},
        (dir / id).string());
  };
  auto finished = train("finished-job", "10");
  auto killed = train("killed-job", "200");
  const auto p1 = finished->wait_for_port("metrics on http://", 60s);
  const auto p2 = killed->wait_for_port("metrics on http://", 60s);
  BOOST_REQUIRE_MESSAGE(p1 && p2, finished->err() << killed->err());
  const std::string done_at = "127.0.0.1:" + std::to_string(*p1), killed_at = "127.0.0.1:" + std::to_string(*p2);
  std::ofstream(dir / "prometheus.yml") << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                                        << "rule_files: ['" << source_dir() << "/monitoring/prometheus/alerts.yml']\n"
                                        << "scrape_configs:\n  - job_name: troupe\n    static_configs:\n"
                                        << "      - targets: ['" << done_at << "', '" << killed_at << "']\n";
  auto [prometheus, prom] = start_prometheus(dir, dir / "prometheus.yml");
  std::string why;
  const auto code = finished->wait(120s);
  BOOST_REQUIRE_MESSAGE(code.has_value(), "the 10-epoch job did not end: " << finished->err());
  BOOST_TEST(*code == 0, finished->err());
  bool down = false;
  for (int i = 0; i < 200 && !down; ++i) {
    std::this_thread::sleep_for(100ms);
    down = query(prom, "up{instance=\"" + done_at + "\"} == 0", why) > 0;
  }
  BOOST_REQUIRE_MESSAGE(down, "Prometheus never saw the finished job go: " << why);
  BOOST_TEST(query(prom, "last_over_time(troupe_job_state{troupe_job=\"finished-job\",state=\"finished\"}[5m]) == 1",
                   why) == 1, why);
  BOOST_TEST(query(prom, "troupe_build_info{troupe_job=\"killed-job\"} == 1", why) == 1, why);
  BOOST_TEST(query(prom, "process_start_time_seconds{troupe_job=\"killed-job\"} > 0", why) == 1, why);
  BOOST_REQUIRE(killed->running());
  killed->signal(SIGKILL);
  killed->wait(10s);
  bool pending = false;
  for (int i = 0; i < 300 && !pending; ++i) {
    std::this_thread::sleep_for(100ms);
    for (const auto& a : alerts_for(prom, killed_at)) pending = pending || a == "TroupeNodeDown";
  }
  BOOST_TEST(pending, "TroupeNodeDown never became pending for the killed job");
  BOOST_TEST(alerts_for(prom, done_at).empty(), "an alert is pending or firing for the job that finished");
  prometheus->signal(SIGTERM);
  prometheus->wait(10s);
  fs::remove_all(dir);
}
