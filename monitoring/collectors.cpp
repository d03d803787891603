// collectors: the process_* metrics from /proc and getrusage, the refusals, and the
// scrape counter.
#include "monitoring/collectors.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "monitoring/refusals.hpp"

namespace troupe::monitoring {

namespace {

// Seconds since the epoch at which this process started: the boot time (/proc/stat's
// btime) plus the process's start in clock ticks after boot (/proc/self/stat's 22nd field).
double start_time() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {}
  double btime = 0;
  std::ifstream sys("/proc/stat");
  for (std::string key; sys >> key;)
    if (key == "btime") {
      sys >> btime;
      break;
    }
  return btime + std::strtod(field.c_str(), nullptr) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

process_collector::process_collector(std::string job) : job_(std::move(job)), start_(start_time()) {}

prometheus::MetricFamily process_collector::one(const char* name, const char* help, prometheus::MetricType type,
                                                double value) const {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  f.metric.resize(1);
  f.metric[0].label = {{"troupe_job", job_}};
  if (type == prometheus::MetricType::Counter)
    f.metric[0].counter.value = value;
  else
    f.metric[0].gauge.value = value;
  return f;
}

std::vector<prometheus::MetricFamily> process_collector::Collect() const {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const double cpu = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                     1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  long pages = 0, resident = 0;
  std::ifstream("/proc/self/statm") >> pages >> resident;
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  std::error_code ec;
  double open_fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++open_fds;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(one("process_cpu_seconds_total", "Total user and system CPU time spent in seconds",
                    prometheus::MetricType::Counter, cpu));
  out.push_back(one("process_resident_memory_bytes", "Resident memory size in bytes", prometheus::MetricType::Gauge,
                    static_cast<double>(resident) * page));
  out.push_back(one("process_virtual_memory_bytes", "Virtual memory size in bytes", prometheus::MetricType::Gauge,
                    static_cast<double>(pages) * page));
  out.push_back(one("process_open_fds", "Number of open file descriptors", prometheus::MetricType::Gauge, open_fds));
  out.push_back(one("process_max_fds", "Maximum number of open file descriptors", prometheus::MetricType::Gauge,
                    static_cast<double>(files.rlim_cur)));
  out.push_back(one("process_start_time_seconds", "Start time of the process since unix epoch in seconds",
                    prometheus::MetricType::Gauge, start_));
  prometheus::MetricFamily refused;
  refused.name = "troupe_refusals_total";
  refused.help = "Frames, connections and messages refused for the job's safety, by reason";
  refused.type = prometheus::MetricType::Counter;
  for (std::size_t i = 0; i < refusal_kinds; ++i) {
    const auto r = static_cast<refusal>(i);
    prometheus::ClientMetric m;
    m.label = {{"troupe_job", job_}, {"reason", std::string(name_of(r))}};
    m.counter.value = static_cast<double>(refusals(r));
    refused.metric.push_back(std::move(m));
  }
  out.push_back(std::move(refused));
  return out;
}

std::vector<prometheus::MetricFamily> scrape_counter::Collect() const {
  {
    std::lock_guard<std::mutex> g(mu_);
    ++count_;
  }
  seen_.notify_all();
  return {};
}

std::uint64_t scrape_counter::count() const {
  std::lock_guard<std::mutex> g(mu_);
  return count_;
}

bool scrape_counter::wait_past(std::uint64_t after, std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> g(mu_);
  return seen_.wait_until(g, deadline, [&] { return count_ > after; });
}

}  // namespace troupe::monitoring
