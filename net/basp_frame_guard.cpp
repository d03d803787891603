// Bounds every BASP frame this process accepts. It must be linked into each executable
// that runs nodes (its definition interposes libcaf_io's caf::io::basp::valid).
//
// Note [Bounded frames]
// CAF 0.17 reads a frame in two steps: a 32-byte header, then exactly payload_len bytes
// into a buffer it resizes first, and the header's only check, basp::valid, accepts any
// payload_len. One header claiming 4 GiB made a node allocate and zero-fill 4 GiB, from
// anyone who could open a connection (plain) or hold a job certificate (TLS), and
// stalled its network I/O meanwhile. libcaf_io calls basp::valid through its PLT right
// after reading a header and before that resize, so the executable's definition below
// runs instead: a frame longer than frame_bound() (the job's largest message plus
// headroom, transport/frame_bound.hpp) is invalid, and CAF closes the connection as it does
// for any invalid header, having allocated nothing. Refusals are counted
// (troupe_refusals_total{reason="oversized_frame"}) and, since a header does not say
// which connection it came on, logged at most once a minute.
#include <caf/io/basp/header.hpp>

#include <dlfcn.h>

#include <spdlog/spdlog.h>

#include "monitoring/refusals.hpp"
#include "transport/frame_bound.hpp"

namespace caf::io::basp {

bool valid(const header& hdr) {
  using real_fn = bool (*)(const header&);
  static const auto real = reinterpret_cast<real_fn>(dlsym(RTLD_NEXT, "_ZN3caf2io4basp5validERKNS1_6headerE"));
  const std::uint64_t bound = troupe::frame_bound();
  if (hdr.payload_len > bound) {
    using troupe::monitoring::refusal;
    if (troupe::monitoring::count_refusal(refusal::oversized_frame, {}))
      spdlog::warn("refused a frame of {} bytes, over this job's bound of {} bytes, and closed its connection ({} so far)",
                   hdr.payload_len, bound, troupe::monitoring::refusals(refusal::oversized_frame));
    return false;
  }
  return real(hdr);
}

}  // namespace caf::io::basp
