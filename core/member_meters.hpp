// member_meters: what a training member reports about itself as it trains: its worker
// metrics (and, in a pipeline, its stage's; on a device, its allocator's), its track in the
// job's trace, and the stage's stored activations and their peak. Each call does nothing
// for what the job's observability leaves off (no metrics, no trace). The member's core
// (core/member_core.hpp) owns it and gives it the figures; it decides nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "monitoring/metrics.hpp"
#include "monitoring/observability.hpp"
#include "tensor/backend_abi.h"

namespace troupe {

class member_meters {
 public:
  using wall = std::chrono::system_clock;

  member_meters() = default;
  // Member `rank` of a job observed through `obs`; `track`: its trace track's name;
  // `stage`: its replica and stage in a pipeline (stage metrics), none otherwise.
  struct stage_place {
    std::uint32_t replica = 0, stage = 0;
  };
  member_meters(const observability& obs, std::uint32_t rank, const std::string& track,
                std::optional<stage_place> stage);
  // The member computes on `device` (its allocator's metrics from then on).
  void on_device(const observability& obs, std::uint32_t rank, const std::string& device);
  bool watches_device() const { return device_.has_value(); }
  void device_memory(const troupe_memory_stats& mem);

  // A span of the trace: `clock` and `microbatch` are -1 for spans outside one.
  void span(const char* name, wall::time_point begin, wall::time_point end, std::int64_t clock = -1,
            std::int32_t microbatch = -1) const;

  void bytes_sent(std::size_t bytes);
  void bytes_received(std::size_t bytes);
  void ring_bytes_sent(std::size_t bytes);
  void ring_bytes_received(std::size_t bytes);
  void pull_took(double seconds);
  void push_took(double seconds);
  void allreduce_took(double seconds);
  void push_refused();

  // Stored activations went up or down by `delta` (+1 a forward, -1 its backward).
  void stored(int delta);
  int peak_stored() const { return peak_; }
  void microbatch_done();

  // A step is done, with what it took and trained.
  struct step_figures {
    double step_seconds = 0, forward_seconds = 0, backward_seconds = 0;
    std::int64_t samples = 0;
    std::optional<double> loss;  // the last stage's
    std::int32_t epoch = 0;
    double learning_rate = 0;
    std::int64_t clock = 0;  // the steps done, this one included
    double busy_seconds = 0, bubble_seconds = 0;
  };
  void step_done(const step_figures& f);

 private:
  std::optional<monitoring::worker_metrics> worker_;
  std::optional<monitoring::stage_metrics> stage_;
  std::optional<monitoring::device_metrics> device_;
  std::shared_ptr<monitoring::trace_log> trace_;
  std::uint32_t track_ = 0;
  int stored_ = 0, peak_ = 0;
};

}  // namespace troupe
