// bell_records: an answer's error, cut to fit a record.
#include "actors/bell_records.hpp"

namespace troupe::bells {

std::vector<std::byte> error_record(caf::actor_system& sys, std::uint64_t id, const caf::error& e) {
  if (auto r = record(sys, kind::error, id, e)) return *r;
  auto f = as_fault(e);
  std::string detail = f ? f->detail : describe(e);
  detail.resize(std::min<std::size_t>(detail.size(), shm::bell_record_payload / 2));
  const errc code = f ? f->code : errc::malformed;
  if (auto r = record(sys, kind::error, id, make_error(fault{code, detail}))) return *r;
  return *record(sys, kind::error, id, make_error(fault{code, "(its detail did not fit the doorbell)"}));
}

}  // namespace troupe::bells
