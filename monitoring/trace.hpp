// A timeline of what the actors did, written as Chrome trace-event JSON (readable by
// Perfetto and chrome://tracing): one process row per node, one track per actor, a span
// per forward, backward, push, pull or update, and asynchronous spans for held pulls.
// Events go into a ring buffer of fixed capacity, so a long run keeps its most recent
// events and the file stays bounded. Recording is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/expected.hpp"

namespace troupe::monitoring {

class trace_log {
 public:
  using time_point = std::chrono::system_clock::time_point;  // wall time: nodes line up

  explicit trace_log(std::size_t capacity = 200000);

  // A named track (a thread row); returns its id.
  std::uint32_t track(const std::string& name);
  // A span on a track; spans on one track must nest (the writer does not check). name
  // must outlive the log (a literal). step and microbatch (when >= 0) become its args.
  void span(std::uint32_t track, const char* name, time_point begin, time_point end, std::int64_t step = -1,
            std::int32_t microbatch = -1);
  // A span that may overlap others (e.g. a held pull), shown on its own lane.
  void async_span(std::uint32_t track, const char* name, std::uint64_t id, time_point begin, time_point end);

  std::size_t recorded() const;  // events kept
  std::size_t dropped() const;   // events the ring buffer overwrote

  // Writes the kept events, oldest first, as {"traceEvents": [...]}.
  expected<bool> write(const std::string& path, const std::string& process_name, std::uint32_t pid) const;

 private:
  struct event {
    const char* name;
    std::uint32_t track;
    bool async;
    std::uint64_t id;
    std::int64_t begin_us, end_us;
    std::int64_t step = -1;
    std::int32_t microbatch = -1;
  };
  mutable std::mutex mu_;
  std::vector<event> ring_;
  std::size_t next_ = 0, total_ = 0;
  std::vector<std::string> tracks_;
};

// Concatenates trace files written by several nodes into one (each keeps its process row).
expected<bool> merge_traces(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace troupe::monitoring
