// shard_train: a training member's pulls on a shard server (every job's pushes and pulls
// are served by shard_push.cpp and shard_pulls.cpp): checked, and answered with its slice
// in the slot, on the lane or in the message; and the gauges that follow the core.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"

namespace troupe::shard_shell {

caf::error not_training(shard_pointer self) {
  return serves_kv(self) ? make_error(errc::bad_job, "a training member's message reached a shard of a key-value job")
                         : not_started(self);
}

// A pull answered with the member's slice, in the slot it offered when the fast path can
// take it (Note [Same-host fast path]), in the message otherwise, in the job's
// --pull-precision (2bit: Note [2-bit pulls], `full` when the member holds no view), on
// the member's bulk lane when it asked and has one (Note [Bulk lanes]): counts the bytes.
// A pull of a piece (checked when it came) is not answered in shared memory.
kv_pull_reply slice_answer(shard_pointer self, const kv_pull& pull) {
  auto& st = self->state;
  const auto& core = *st.core;
  const std::uint32_t member = pull.worker;
  const shared_tensor& reply_to = pull.reply_to;
  kv_pull_reply r{st.index, {core.version_for(member)}, tensor(), {}, {}, pull.piece_offset, pull.piece_numel};
  st.core->answered(member, pull.piece_offset, pull.piece_numel);  // Note [Delay compensation]
  if (pull.piece_numel > 0) {
    r.data = core.piece_for(member, pull.piece_offset, pull.piece_numel);
    if (st.pull_precision.kind != codec_kind::none) r.data = encode(st.pull_precision, r.data);
    if (st.m) st.m->bytes_sent->Increment(static_cast<double>(r.data.nbytes()));
    if (auto d = answer_on_lane(self, member, pull.lane_reply, r.data)) r.lane = std::move(*d);
    return r;
  }
  const std::int64_t numel = core.slice_numel(member);
  if (st.channels && !reply_to.empty()) {
    std::string refused;
    auto pack = [&](tensor_view out) { core.pack_slice_into(member, core.params(), out); };
    if (auto where = st.channels->answer_with(member, reply_to, {numel}, pack, refused)) {
      if (st.m) st.m->bytes_sent->Increment(static_cast<double>(numel * 4));
      if (st.views) st.views->forget(member);  // it holds the f32 values now
      watch_bell(self, member, reply_to);
      r.shared = std::move(*where);
      return r;
    }
    if (!refused.empty()) spdlog::info("shard {}: answers worker {} over the network: {}", st.index, member, refused);
  }
  r.data = core.params_for(member);
  if (st.views)
    r.data = st.views->answer(member, std::move(r.data), pull.full);
  else if (st.pull_precision.kind != codec_kind::none)
    r.data = encode(st.pull_precision, r.data);
  if (st.m) st.m->bytes_sent->Increment(static_cast<double>(r.data.nbytes()));
  if (auto d = answer_on_lane(self, member, pull.lane_reply, r.data)) r.lane = std::move(*d);
  return r;
}

// Brings the gauges and counters in line with the core after a message.
void observe(shard_pointer self) {
  auto& st = self->state;
  if (!st.m) return;
  const auto& c = st.core->counters();
  if (c.updates > st.updates_seen) st.m->updates->Increment(static_cast<double>(c.updates - st.updates_seen));
  st.updates_seen = c.updates;
  st.m->version->Set(static_cast<double>(st.core->version()));
  st.m->pulls_held->Set(static_cast<double>(st.core->held()));
  st.m->mailbox->Set(static_cast<double>(self->mailbox().size()));
}

std::string wrong_step_parts(const shard_core& core, std::uint32_t worker, const std::vector<kv_part_id>& parts) {
  if (parts.size() == 1 && parts.front() == core.part_of(worker)) return "";
  const std::string named = parts.size() == 1 ? "part " + std::to_string(parts.front() & 0xFFFF) + " of key id " +
                                                    std::to_string(parts.front() >> 16)
                                              : std::to_string(parts.size()) + " parts";
  return "a training member's call names " + named +
         "; it names one, the part of the member's stage (run the same troupe build on every node)";
}

std::optional<fault> check_step_pull(shard_pointer self, const kv_pull& r) {
  auto& st = self->state;
  std::string wrong = wrong_step_parts(*st.core, r.worker, r.parts);
  if (wrong.empty() && r.piece_numel != 0)
    wrong = st.views ? "a pull in pieces does not go with --pull-precision 2bit (a member's view is of its whole slice)"
                     : st.core->check_piece(r.worker, r.piece_offset, r.piece_numel);
  if (wrong.empty()) return std::nullopt;
  if (st.m) st.m->rejected(to_string(errc::bad_shape))->Increment();
  spdlog::warn("shard {}: refused a pull of worker {}: {}", st.index, r.worker, wrong);
  return fault{errc::bad_shape, wrong};
}

}  // namespace troupe::shard_shell
