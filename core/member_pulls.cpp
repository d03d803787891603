// member_core, part 2 (with member_step.cpp): the training loop's pulls: whole slices
// or, with gradient buckets, a piece per bucket (Note [Gradient buckets]); checking,
// decoding and unpacking each answer; starting or continuing the step as they arrive.
#include <algorithm>
#include <limits>
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
  step_begin_ = wall::now();
  pulls_pending_ = 0;
  if (slices_.active().empty()) {
    // Nothing to pull (--servers 0, or a local group's member): the step starts from the
    // mailbox, so the loop never recurses and exits and deaths are seen every step.
    out.push_back(schedule_step{});
    return;
  }
  const bool deltas = place_.job.pull_precision.kind == codec_kind::two_bit;
  bucket_missing_.assign(slices_.buckets().size(), 0);
  for (std::uint32_t s : slices_.active()) {
    piece_asked_[s].assign(slices_.buckets().size(), false);
    for (std::size_t k = 0; k < slices_.buckets().size(); ++k) bucket_missing_[k] += slices_.piece(s, k).numel > 0;
    if (!in_pieces(s) || deltas) {
      ++pulls_pending_;
      out.push_back(pull{s, pull_request{s, place_.rank, clock_, {}, deltas && pulled_[s].empty()}});
      continue;
    }
    base_version_[s] = std::numeric_limits<std::int64_t>::max();  // the oldest piece's, once in
    for (std::size_t k = slices_.buckets().size(); k-- > 0;) {
      const slice_piece& p = slices_.piece(s, k);
      if (p.numel == 0) continue;
      piece_asked_[s][k] = true;
      ++pulls_pending_;
      pull_request r{s, place_.rank, clock_, {}, false};
      if (p.numel < slices_.numel(s)) {
        r.piece_offset = p.offset;
        r.piece_numel = p.numel;
      }
      out.push_back(pull{s, r});
    }
  }
}

int member_core::layers_with_params() const {
  if (bucket_missing_.empty()) return net_->num_layers();  // nothing is pulled
  int top = 0;
  for (std::size_t k = slices_.buckets().size(); k-- > 0 && bucket_missing_[k] == 0;)
    top = slices_.buckets()[k].top_layer;
  return top;
}

member_actions_list member_core::on_params(std::uint32_t s, params_reply r) {
  member_actions_list out;
  if (phase_ != member_phase::training || pulls_pending_ == 0) return out;
  const std::string from = "shard " + std::to_string(s);
  // A piece answers one bucket's pull; anything else the whole slice.
  std::optional<std::size_t> bucket;
  std::int64_t expect = s < slices_.shards() ? slices_.numel(s) : 0;
  if (s < piece_asked_.size() &&
      std::find(piece_asked_[s].begin(), piece_asked_[s].end(), true) != piece_asked_[s].end()) {
    for (std::size_t k = 0; k < slices_.buckets().size(); ++k) {
      const slice_piece& p = slices_.piece(s, k);
      const bool whole = p.numel == slices_.numel(s);
      if (piece_asked_[s][k] && (whole ? r.piece_numel == 0 : r.piece_offset == p.offset && r.piece_numel == p.numel))
        bucket = k;
    }
    if (!bucket) {
      stop({errc::bad_shape, from + " answered with the piece [" + std::to_string(r.piece_offset) + ", +" +
                                 std::to_string(r.piece_numel) +
                                 ") of its slice, which was not asked for; run the same troupe build on every node"},
           out);
      return out;
    }
    expect = slices_.piece(s, *bucket).numel;
  }
  const grad_codec& precision = place_.job.pull_precision;
  if (precision.kind == codec_kind::two_bit && s < slices_.shards()) {
    // Note [2-bit pulls]: the answer updates the view this member holds, which is used.
    meters_.bytes_received(r.params.nbytes());
    if (auto e = apply_pull(precision, pulled_[s], r.params, slices_.numel(s))) {
      stop({errc::bad_dtype, from + " answered with " + *e}, out);
      return out;
    }
    r.params = tensor(pulled_[s]);
  } else if (precision.kind != codec_kind::none && r.params.type() != dtype::f32 && s < slices_.shards()) {
    auto decoded = decode(precision, r.params, expect);
    if (!decoded) {
      stop({errc::bad_dtype, from + " answered with " + decoded.error().message}, out);
      return out;
    }
    meters_.bytes_received(r.params.nbytes());
    r.params = std::move(*decoded);
  } else {
    meters_.bytes_received(r.params.nbytes());
  }
  if (r.shard != s || s >= slices_.shards() || held_numel(r.params) != expect || r.params.type() != dtype::f32) {
    stop({errc::bad_shape, from + " answered with " + std::to_string(held_numel(r.params)) + " " +
                               std::string(name_of(r.params.type())) + " parameters, expected " +
                               std::to_string(expect) + " f32; run the same troupe build on every node"},
         out);
    return out;
  }
  if (!simulated() && !guarded("taking the parameters of shard " + std::to_string(s), out, [&] {
        if (bucket && expect < slices_.numel(s))
          unpack_piece(rep_->params(), r.params, slices_.ranges(s), slices_.buckets()[*bucket].lo,
                       slices_.buckets()[*bucket].hi);
        else
          unpack_shard(rep_->params(), r.params, slices_.ranges(s));
      }))
    return out;
  base_version_[s] = bucket ? std::min(base_version_[s], r.version) : r.version;
  took_params(s, bucket, out);
  return out;
}

// The answer of shard s is unpacked (one bucket's piece, or nullopt: its whole slice):
// uploads what it completed, and starts or continues the step.
void member_core::took_params(std::uint32_t s, std::optional<std::size_t> bucket, member_actions_list& out) {
  --pulls_pending_;
  for (std::size_t k = 0; k < slices_.buckets().size(); ++k) {
    if (slices_.piece(s, k).numel == 0 || (bucket && k != *bucket)) continue;
    if (bucket) piece_asked_[s][k] = false;
    if (--bucket_missing_[k] > 0 || simulated()) continue;
    const gradient_bucket& b = slices_.buckets()[k];
    if (!guarded("uploading its parameters", out, [&] { rep_->commit_params(b.lo, b.hi - b.lo); })) return;
  }
  if (pulls_pending_ == 0) {
    if (grouped() && !in_group("parameter broadcast", out, [&] { rep_->share_params(*comm_, true); })) return;
    trace_span("pull", step_begin_, wall::now());
    meters_.pull_took(seconds_between(step_begin_, wall::now()));
  }
  if (in_step_)
    run_actions(out);  // the first forward goes on with the layers just completed
  else if (pulls_pending_ == 0 || layers_with_params() > 0)
    begin_step(out);
}

member_actions_list member_core::on_pull_failed(std::uint32_t s, const std::string& why) {
  member_actions_list out;
  stop({errc::stalled,
        "pull from shard " + std::to_string(s) + " at clock " + std::to_string(clock_) + " failed: " + why},
       out);
  return out;
}

}  // namespace troupe
