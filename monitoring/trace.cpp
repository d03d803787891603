// trace_log: the ring buffer and the Chrome trace-event writer; merge_traces.
#include "monitoring/trace.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace troupe::monitoring {

namespace {

std::int64_t micros(trace_log::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

trace_log::trace_log(std::size_t capacity) : ring_(std::max<std::size_t>(capacity, 16)) {}

std::uint32_t trace_log::track(const std::string& name) {
  std::lock_guard<std::mutex> g(mu_);
  tracks_.push_back(name);
  return static_cast<std::uint32_t>(tracks_.size());
}

void trace_log::span(std::uint32_t track, const char* name, time_point begin, time_point end, std::int64_t step,
                     std::int32_t microbatch) {
  std::lock_guard<std::mutex> g(mu_);
  ring_[next_] = {name, track, false, 0, micros(begin), micros(end), step, microbatch};
  next_ = (next_ + 1) % ring_.size();
  ++total_;
}

void trace_log::async_span(std::uint32_t track, const char* name, std::uint64_t id, time_point begin, time_point end) {
  std::lock_guard<std::mutex> g(mu_);
  ring_[next_] = {name, track, true, id, micros(begin), micros(end)};
  next_ = (next_ + 1) % ring_.size();
  ++total_;
}

std::size_t trace_log::recorded() const {
  std::lock_guard<std::mutex> g(mu_);
  return std::min(total_, ring_.size());
}

std::size_t trace_log::dropped() const {
  std::lock_guard<std::mutex> g(mu_);
  return total_ > ring_.size() ? total_ - ring_.size() : 0;
}

expected<bool> trace_log::write(const std::string& path, const std::string& process_name, std::uint32_t pid) const {
  std::lock_guard<std::mutex> g(mu_);
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", process_name}}}});
  for (std::size_t t = 0; t < tracks_.size(); ++t)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", t + 1}, {"args", {{"name", tracks_[t]}}}});
  const std::size_t kept = std::min(total_, ring_.size());
  const std::size_t first = total_ > ring_.size() ? next_ : 0;
  std::vector<event> ordered;
  ordered.reserve(kept);
  for (std::size_t i = 0; i < kept; ++i) ordered.push_back(ring_[(first + i) % ring_.size()]);
  std::stable_sort(ordered.begin(), ordered.end(), [](const event& a, const event& b) { return a.begin_us < b.begin_us; });
  for (const auto& e : ordered) {
    if (!e.async) {
      nlohmann::json x{{"ph", "X"}, {"name", e.name}, {"cat", "troupe"}, {"pid", pid}, {"tid", e.track},
                       {"ts", e.begin_us}, {"dur", e.end_us - e.begin_us}};
      if (e.step >= 0) x["args"]["step"] = e.step;
      if (e.microbatch >= 0) x["args"]["microbatch"] = e.microbatch;
      events.push_back(std::move(x));
    } else {
      events.push_back({{"ph", "b"}, {"name", e.name}, {"cat", "troupe"}, {"id", e.id}, {"pid", pid}, {"tid", e.track},
                        {"ts", e.begin_us}});
      events.push_back({{"ph", "e"}, {"name", e.name}, {"cat", "troupe"}, {"id", e.id}, {"pid", pid}, {"tid", e.track},
                        {"ts", e.end_us}});
    }
  }
  std::ofstream out(path);
  if (!out) return failure{"--trace: cannot write " + path};
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  if (!out) return failure{"--trace: writing " + path + " failed"};
  return true;
}

expected<bool> merge_traces(const std::vector<std::string>& inputs, const std::string& output) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& path : inputs) {
    std::ifstream in(path);
    if (!in) continue;  // a node that died wrote nothing
    try {
      const auto doc = nlohmann::json::parse(in);
      for (const auto& e : doc.at("traceEvents")) events.push_back(e);
    } catch (const std::exception& e) {
      return failure{"cannot read the trace " + path + ": " + e.what()};
    }
  }
  std::ofstream out(output);
  if (!out) return failure{"--trace: cannot write " + output};
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  return true;
}

}  // namespace troupe::monitoring
