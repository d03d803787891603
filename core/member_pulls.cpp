// member_core, part 2 (with member_step.cpp): the training loop's pulls: whole slices
// or, with gradient buckets, a piece per bucket (Note [Gradient buckets]); checking,
// decoding and unpacking each answer; starting or continuing the step as they arrive.
// Which pulls a step makes and which of them are answered is pull_round's
// (core/pull_round.hpp).
#include <optional>

#include "core/key_table.hpp"
#include "core/member_core.hpp"
#include "core/pull_views.hpp"

namespace troupe {

using namespace member_actions;

// Layer-by-layer pulls (Note [Gradient buckets]): a shard that takes pieces is asked for
// one piece per bucket, the lowest layers' first, and the step's first forward starts as
// soon as they are here; the others are asked for their whole slice.
void member_core::start_pulls(member_actions_list& out) {
  step_.begin = wall::now();
  auto asks = pulls_.start(slices_, place_.rank, stage_, time_.clock(), [this](std::uint32_t s) { return in_pieces(s); });
  if (asks.empty()) {
    // Nothing to pull (--servers 0, or a local group's member): the step starts from the
    // mailbox, so the loop never recurses and exits and deaths are seen every step.
    out.push_back(schedule_step{});
    return;
  }
  for (kv_pull& r : asks) out.push_back(pull{r.shard, std::move(r)});
}

member_actions_list member_core::on_params(std::uint32_t s, kv_pull_reply r) {
  member_actions_list out;
  if (phase_ != member_phase::training || !pulls_.open()) return out;
  const std::string from = "shard " + std::to_string(s);
  // A piece answers one bucket's pull; anything else the whole slice.
  const pull_round::answer_place at = pulls_.place_of(slices_, s, r.piece_offset, r.piece_numel);
  if (!at.asked) {
    stop({errc::bad_shape, from + " answered with " +
                               (r.piece_numel > 0 ? "the piece [" + std::to_string(r.piece_offset) + ", +" +
                                                        std::to_string(r.piece_numel) + ") of its slice"
                                                  : std::string("its whole slice")) +
                               ", which was not asked for; run the same troupe build on every node"},
         out);
    return out;
  }
  const std::optional<std::size_t> bucket = at.bucket;
  const std::int64_t expect = at.numel;
  const grad_codec& precision = place_.job.pull_precision;
  if (precision.kind == codec_kind::two_bit && s < slices_.shards()) {
    // Note [2-bit pulls]: the answer updates the view this member holds, which is used.
    meters_.bytes_received(r.data.nbytes());
    if (auto e = apply_pull(precision, pulls_.view(s), r.data, slices_.numel(s))) {
      stop({errc::bad_dtype, from + " answered with " + *e}, out);
      return out;
    }
    r.data = tensor(pulls_.view(s));
  } else if (precision.kind != codec_kind::none && r.data.type() != dtype::f32 && s < slices_.shards()) {
    auto decoded = decode(precision, r.data, expect);
    if (!decoded) {
      stop({errc::bad_dtype, from + " answered with " + decoded.error().message}, out);
      return out;
    }
    meters_.bytes_received(r.data.nbytes());
    r.data = std::move(*decoded);
  } else {
    meters_.bytes_received(r.data.nbytes());
  }
  if (r.shard != s || s >= slices_.shards() || r.versions.size() != 1 || held_numel(r.data) != expect ||
      r.data.type() != dtype::f32) {
    stop({errc::bad_shape, from + " answered with " + std::to_string(held_numel(r.data)) + " " +
                               std::string(name_of(r.data.type())) + " parameters, expected " +
                               std::to_string(expect) + " f32; run the same troupe build on every node"},
         out);
    return out;
  }
  if (!simulated() && !guarded("taking the parameters of shard " + std::to_string(s), out, [&] {
        if (bucket && expect < slices_.numel(s))
          unpack_piece(rep_->params(), r.data, slices_.ranges(s), slices_.buckets()[*bucket].lo,
                       slices_.buckets()[*bucket].hi);
        else
          unpack_shard(rep_->params(), r.data, slices_.ranges(s));
      }))
    return out;
  took_params(s, bucket, r.versions.front(), out);
  return out;
}

// The answer of shard s at `version` is unpacked (one bucket's piece, or nullopt: its
// whole slice): uploads the buckets it completed, and starts or continues the step.
void member_core::took_params(std::uint32_t s, std::optional<std::size_t> bucket, std::int64_t version,
                              member_actions_list& out) {
  for (std::size_t k : pulls_.took(slices_, s, bucket, version)) {
    if (simulated()) continue;
    const gradient_bucket& b = slices_.buckets()[k];
    if (!guarded("uploading its parameters", out, [&] { rep_->commit_params(b.lo, b.hi - b.lo); })) return;
  }
  if (!pulls_.open()) {
    if (grouped() && !in_group("parameter broadcast", out, [&] { rep_->share_params(device_.group(), true); })) return;
    trace_span("pull", step_.begin, wall::now());
    meters_.pull_took(seconds_between(step_.begin, wall::now()));
  }
  if (step_.running)
    run_actions(out);  // the first forward goes on with the layers just completed
  else if (!pulls_.open() || pulls_.layers_ready(slices_, net_->num_layers()) > 0)
    begin_step(out);
}

member_actions_list member_core::on_pull_failed(std::uint32_t s, const std::string& why) {
  member_actions_list out;
  stop({errc::stalled,
        "pull from shard " + std::to_string(s) + " at clock " + std::to_string(time_.clock()) + " failed: " + why},
       out);
  return out;
}

}  // namespace troupe
