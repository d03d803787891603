// member_device: opening a member's device, and its local group.
#include "core/member_device.hpp"

#include "base/compute_fault.hpp"

namespace troupe {

std::optional<fault> member_device::open(const compute_options& c, std::uint32_t rank, bool grouped,
                                         const std::string& who) {
  if (c.products != precision::fp32 && c.where.kind != device_kind::cpu)
    return fault{errc::bad_job, who + ": --precision " + std::string(name_of(c.products)) +
                                    " computes on the CPU only, and this member computes on " + to_string(c.where) +
                                    "; drop --precision there, or use --tf32 for faster products on CUDA"};
  if (c.where.kind != device_kind::cpu) {
    device where = c.where;
    if (c.spread_over_devices) {
      int count = 0;
      auto table = backend_table(where.kind);
      if (table && (*table)->device_count(&count) == 0 && count > 0)
        where.index = static_cast<int>(rank % static_cast<std::uint32_t>(count));
    }
    auto b = backend_context::open(where);
    if (!b) return fault{errc::bad_job, who + ": " + b.error().message};
    backend_ = std::make_unique<backend_context>(std::move(b).value());
    exec_ = compute(*backend_);
    off_host_ = where;
  } else if (grouped) {  // the CPU backend, for its collectives; the math is the host's
    backend_ = std::make_unique<backend_context>(backend_context::open(cpu_device).value());
    exec_ = compute(*backend_);
  }
  exec_.set_precision(c.products);
  if (!c.tf32 || !off_host_) return std::nullopt;
  return catch_compute(who + ": turning on TF32",
                       [&] { backend_->call("set_tf32", &troupe_backend_v1::set_tf32, 1); });
}

void member_device::join_group(const std::vector<std::uint8_t>& id, int ranks, int rank,
                               std::chrono::milliseconds timeout) {
  group_ = std::make_unique<group_comm>(*backend_, id, ranks, rank, timeout);
}

}  // namespace troupe
