// Tests for monitoring/collectors.cpp: the process_* metrics describe this process (its
// start time, open files, memory), the refusals are there by reason, and the scrape
// counter counts and wakes a waiter, or lets it go at its deadline.
#define BOOST_TEST_MODULE collectors
#include <boost/test/unit_test.hpp>

#include <sys/time.h>

#include <future>
#include <map>
#include <thread>

#include "monitoring/collectors.hpp"

using namespace troupe::monitoring;
using namespace std::chrono;

namespace {

// name -> value of the families with one sample, each checked to carry the job label.
std::map<std::string, double> single_values(const std::vector<prometheus::MetricFamily>& families) {
  std::map<std::string, double> out;
  for (const auto& f : families) {
    if (f.metric.size() != 1) continue;
    const auto& m = f.metric.front();
    BOOST_TEST(m.label.size() == 1u, f.name);
    BOOST_TEST((!m.label.empty() && m.label.front().name == "troupe_job" && m.label.front().value == "job-c"), f.name);
    out[f.name] = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(process_metrics_describe_this_process) {
  process_collector c("job-c");
  const auto families = c.Collect();
  const auto v = single_values(families);
  timeval now{};
  gettimeofday(&now, nullptr);
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                           "process_open_fds", "process_max_fds", "process_start_time_seconds"})
    BOOST_TEST(v.count(name) == 1u, name);
  BOOST_TEST(v.at("process_start_time_seconds") <= static_cast<double>(now.tv_sec) + 1);
  BOOST_TEST(v.at("process_start_time_seconds") > static_cast<double>(now.tv_sec) - 600);  // the test just started
  BOOST_TEST(v.at("process_open_fds") >= 3);
  BOOST_TEST(v.at("process_max_fds") >= v.at("process_open_fds"));
  BOOST_TEST(v.at("process_virtual_memory_bytes") >= v.at("process_resident_memory_bytes"));
  bool refusals = false;
  for (const auto& f : families) refusals = refusals || (f.name == "troupe_refusals_total" && f.metric.size() > 1);
  BOOST_TEST(refusals);  // one counter per reason
}

BOOST_AUTO_TEST_CASE(the_scrape_counter_wakes_a_waiter_or_lets_it_go_at_its_deadline) {
  scrape_counter c;
  BOOST_TEST(c.count() == 0u);
  BOOST_TEST(c.Collect().empty());  // it adds no metric of its own
  BOOST_TEST(c.count() == 1u);
  auto waiter = std::async(std::launch::async, [&] { return c.wait_past(1, steady_clock::now() + seconds(30)); });
  std::this_thread::sleep_for(milliseconds(100));
  c.Collect();
  BOOST_TEST(waiter.get());
  const auto t0 = steady_clock::now();
  BOOST_TEST(!c.wait_past(2, t0 + milliseconds(200)));
  BOOST_TEST(duration_cast<milliseconds>(steady_clock::now() - t0).count() >= 150);
}
