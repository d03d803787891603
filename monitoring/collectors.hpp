// The collectables the exposer reads besides the registry: this process's process_*
// metrics and refusals, and a counter of the exposer's own scrapes (which the job's
// linger waits on, Note [Job state and linger] in metrics.cpp).
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace troupe::monitoring {

// The process_* metrics node-exporter's and the client libraries' process collectors
// export (CPU time, memory, file descriptors, start time) and the refusals of this
// process (monitoring/refusals.hpp), read from /proc at each scrape; every one labelled
// with the job.
class process_collector : public prometheus::Collectable {
 public:
  explicit process_collector(std::string job);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  prometheus::MetricFamily one(const char* name, const char* help, prometheus::MetricType type, double value) const;

  std::string job_;
  double start_;  // seconds since the epoch
};

// Counts the exposer's scrapes; registered before every other collectable, so a scrape
// is counted before it reads the job's state.
class scrape_counter : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
  std::uint64_t count() const;
  // Waits until more than `after` scrapes have begun, or until `deadline`; false then.
  bool wait_past(std::uint64_t after, std::chrono::steady_clock::time_point deadline) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable seen_;
  mutable std::uint64_t count_ = 0;
};

}  // namespace troupe::monitoring
