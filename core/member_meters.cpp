// member_meters: a training member's metrics, trace spans and stored activations.
#include "core/member_meters.hpp"

#include <algorithm>

#include "monitoring/trace.hpp"

namespace troupe {

member_meters::member_meters(const observability& obs, std::uint32_t rank, const std::string& track,
                             std::optional<stage_place> stage)
    : trace_(obs.trace) {
  if (obs.metrics) {
    worker_ = obs.metrics->worker(rank);
    if (stage) stage_ = obs.metrics->stage(stage->replica, stage->stage);
  }
  if (trace_) track_ = trace_->track(track);
}

void member_meters::on_device(const observability& obs, std::uint32_t rank, const std::string& device) {
  if (obs.metrics) device_ = obs.metrics->device(rank, device);
}

void member_meters::device_memory(const troupe_memory_stats& mem) {
  if (device_) device_->record(mem.bytes_in_use, mem.bytes_cached, mem.cache_hits, mem.device_mallocs);
}

void member_meters::span(const char* name, wall::time_point begin, wall::time_point end, std::int64_t clock,
                         std::int32_t microbatch) const {
  if (trace_) trace_->span(track_, name, begin, end, clock, microbatch);
}

void member_meters::bytes_sent(std::size_t bytes) {
  if (worker_) worker_->bytes_sent->Increment(static_cast<double>(bytes));
}
void member_meters::bytes_received(std::size_t bytes) {
  if (worker_) worker_->bytes_received->Increment(static_cast<double>(bytes));
}
void member_meters::ring_bytes_sent(std::size_t bytes) {
  if (worker_) worker_->ring_bytes_sent->Increment(static_cast<double>(bytes));
}
void member_meters::ring_bytes_received(std::size_t bytes) {
  if (worker_) worker_->ring_bytes_received->Increment(static_cast<double>(bytes));
}
void member_meters::pull_took(double seconds) {
  if (worker_) worker_->pull_seconds->Observe(seconds);
}
void member_meters::push_took(double seconds) {
  if (worker_) worker_->push_seconds->Observe(seconds);
}
void member_meters::allreduce_took(double seconds) {
  if (worker_) worker_->allreduce_seconds->Observe(seconds);
}
void member_meters::push_refused() {
  if (worker_) worker_->rejected->Increment();
}

void member_meters::stored(int delta) {
  stored_ += delta;
  peak_ = std::max(peak_, stored_);
  if (stage_) {
    stage_->stored_activations->Set(stored_);
    stage_->peak_stored_activations->Set(peak_);
  }
}

void member_meters::microbatch_done() {
  if (stage_) stage_->microbatches->Increment();
}

void member_meters::step_done(const step_figures& f) {
  if (worker_) {
    worker_->step_seconds->Observe(f.step_seconds);
    worker_->forward_seconds->Observe(f.forward_seconds);
    worker_->backward_seconds->Observe(f.backward_seconds);
    worker_->samples->Increment(static_cast<double>(f.samples));
    if (f.loss) worker_->loss->Set(*f.loss);
    worker_->epoch->Set(f.epoch);
    worker_->learning_rate->Set(f.learning_rate);
    worker_->clock->Set(static_cast<double>(f.clock));
  }
  if (stage_) {
    stage_->busy_seconds->Increment(f.busy_seconds);
    stage_->bubble_seconds->Increment(f.bubble_seconds);
  }
}

}  // namespace troupe
