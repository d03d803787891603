// One rank's part of a ring collective (Note [The ring] in the header).
#include "core/ring_collective.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "base/enum_names.hpp"

namespace troupe {

// reduce_op's names, for its parse and name_of.
constexpr std::array<enum_name<reduce_op>, 5> reduce_ops{{
    {reduce_op::sum, "sum"},
    {reduce_op::avg, "avg"},
    {reduce_op::max, "max"},
    {reduce_op::min, "min"},
    {reduce_op::product, "product"},
}};

expected<reduce_op> parse_reduce_op(std::string_view name) { return parse_in(reduce_ops, name, "reduction"); }

std::string_view name_of(reduce_op x) { return name_in(reduce_ops, x); }

namespace {

std::string_view name_of(ring_phase p) { return p == ring_phase::reduce_scatter ? "reduce-scatter" : "all-gather"; }

}  // namespace

std::optional<std::string> ring_collective::check(const ring_spec& spec, const_tensor_view values) {
  if (spec.world == 0) return "a ring needs at least one rank";
  if (spec.rank >= spec.world)
    return "rank " + std::to_string(spec.rank) + " is not in a ring of " + std::to_string(spec.world);
  if (spec.piece_elems < 1) return "the piece size must be at least one element";
  if (values.type() != dtype::f32) return "collectives take f32 tensors, not " + std::string(name_of(values.type()));
  if (!values.is_contiguous()) return "collectives take contiguous tensors";
  return std::nullopt;
}

ring_collective::ring_collective(const ring_spec& spec, tensor_view values, reduce_op op, bool reduces,
                                 std::vector<chunk> chunks)
    : spec_(spec), values_(values), op_(op), reduces_(reduces), chunks_(std::move(chunks)) {
  for (int phase = 0; phase < 2; ++phase) {
    got_[phase].resize(chunks_.size());
    for (std::uint32_t c = 0; c < chunks_.size(); ++c) {
      if (!receives(static_cast<ring_phase>(phase), c)) continue;
      got_[phase][c].assign(static_cast<std::size_t>(pieces_of(chunks_[c])), false);
      missing_ += pieces_of(chunks_[c]);
      if (phase == 0) scatter_missing_ += pieces_of(chunks_[c]);
    }
  }
}

expected<ring_collective> ring_collective::all_reduce(const ring_spec& spec, tensor_view values, reduce_op op) {
  if (auto e = check(spec, values)) return failure{"all-reduce: " + *e};
  const std::int64_t n = values.numel(), w = spec.world;
  std::vector<chunk> chunks(spec.world);
  std::int64_t lo = 0;
  for (std::uint32_t c = 0; c < spec.world; ++c) {
    const std::int64_t len = n / w + (static_cast<std::int64_t>(c) < n % w ? 1 : 0);
    chunks[c] = {lo, lo + len, (c + spec.world - 1) % spec.world};
    lo += len;
  }
  return ring_collective(spec, values, op, true, std::move(chunks));
}

expected<ring_collective> ring_collective::broadcast(const ring_spec& spec, tensor_view values, std::uint32_t root) {
  if (auto e = check(spec, values)) return failure{"broadcast: " + *e};
  if (root >= spec.world)
    return failure{"broadcast: root " + std::to_string(root) + " is not in a ring of " + std::to_string(spec.world)};
  return ring_collective(spec, values, reduce_op::sum, false, {{0, values.numel(), root}});
}

expected<ring_collective> ring_collective::all_gather(const ring_spec& spec, const_tensor_view mine, tensor_view out,
                                                      const std::vector<std::int64_t>& counts) {
  if (auto e = check(spec, out)) return failure{"all-gather: " + *e};
  if (counts.size() != spec.world)
    return failure{"all-gather: " + std::to_string(counts.size()) + " counts for a ring of " +
                   std::to_string(spec.world)};
  std::vector<chunk> chunks(spec.world);
  std::int64_t lo = 0;
  for (std::uint32_t r = 0; r < spec.world; ++r) {
    if (counts[r] < 0) return failure{"all-gather: rank " + std::to_string(r) + "'s count is negative"};
    chunks[r] = {lo, lo + counts[r], r};
    lo += counts[r];
  }
  if (out.numel() != lo)
    return failure{"all-gather: the output holds " + std::to_string(out.numel()) + " floats, the counts sum to " +
                   std::to_string(lo)};
  if (mine.type() != dtype::f32 || mine.numel() != counts[spec.rank])
    return failure{"all-gather: this rank's block holds " + std::to_string(mine.numel()) + " " +
                   std::string(name_of(mine.type())) + ", its count says " + std::to_string(counts[spec.rank]) +
                   " f32"};
  const chunk& own = chunks[spec.rank];
  copy(out.flat(own.lo, own.hi - own.lo), mine);
  return ring_collective(spec, out, reduce_op::sum, false, std::move(chunks));
}

std::int64_t ring_collective::pieces_of(const chunk& c) const {
  return (c.hi - c.lo + spec_.piece_elems - 1) / spec_.piece_elems;
}

std::uint32_t ring_collective::hops(ring_phase phase, std::uint32_t c) const {
  // A chunk's reduce-scatter starts at the rank of its number, its all-gather at its owner.
  const std::uint32_t first = phase == ring_phase::reduce_scatter ? c : chunks_[c].owner;
  return (spec_.rank + spec_.world - first) % spec_.world;
}

bool ring_collective::receives(ring_phase phase, std::uint32_t c) const {
  if (phase == ring_phase::reduce_scatter && !reduces_) return false;
  return hops(phase, c) != 0;
}

ring_piece ring_collective::piece(ring_phase phase, std::uint32_t c, std::int64_t offset, std::int64_t numel,
                                  tensor values, bool fill) const {
  ring_piece p;
  p.collective = spec_.collective;
  p.phase = phase;
  p.chunk = c;
  p.offset = offset;
  if (values.empty()) values = buffer(numel);
  p.values = values.empty() ? tensor::uninitialized({numel}) : std::move(values);
  if (fill) copy(p.values, values_.flat(offset, numel));
  return p;
}

std::vector<ring_piece> ring_collective::start() {
  std::vector<ring_piece> out;
  if (started_) return out;
  started_ = true;
  if (spec_.world == 1) return out;
  // All-reduce: this rank's own chunk starts its reduce-scatter here. The others: the
  // chunk this rank owns starts its all-gather here.
  for (std::uint32_t c = 0; c < chunks_.size(); ++c) {
    const ring_phase phase = reduces_ ? ring_phase::reduce_scatter : ring_phase::all_gather;
    if (hops(phase, c) != 0) continue;
    for (std::int64_t at = chunks_[c].lo; at < chunks_[c].hi; at += spec_.piece_elems)
      out.push_back(piece(phase, c, at, std::min(spec_.piece_elems, chunks_[c].hi - at)));
  }
  return out;
}

std::optional<fault> ring_collective::refusal(const ring_piece& p) const {
  const std::string from = "a piece from ring rank " + std::to_string((spec_.rank + spec_.world - 1) % spec_.world);
  if (p.collective != spec_.collective)
    return fault{errc::bad_clock, from + " belongs to collective " + std::to_string(p.collective) + ", not " +
                                      std::to_string(spec_.collective)};
  if (p.phase != ring_phase::reduce_scatter && p.phase != ring_phase::all_gather)
    return fault{errc::malformed, from + " names an unknown phase"};
  if (p.chunk >= chunks_.size())
    return fault{errc::malformed, from + " names chunk " + std::to_string(p.chunk) + " of " +
                                      std::to_string(chunks_.size())};
  if (!receives(p.phase, p.chunk))
    return fault{errc::malformed, from + " brings chunk " + std::to_string(p.chunk) + " in the " +
                                      std::string(name_of(p.phase)) + ", which rank " + std::to_string(spec_.rank) +
                                      " never receives there"};
  if (p.values.type() != dtype::f32)
    return fault{errc::bad_dtype, from + " holds " + std::string(name_of(p.values.type())) + ", not f32"};
  const chunk& c = chunks_[p.chunk];
  const std::int64_t k = (p.offset - c.lo) / spec_.piece_elems;
  const bool placed = p.offset >= c.lo && p.offset < c.hi && (p.offset - c.lo) % spec_.piece_elems == 0;
  if (!placed || held_numel(p.values) != std::min(spec_.piece_elems, c.hi - p.offset))
    return fault{errc::bad_shape, from + " holds [" + std::to_string(p.offset) + ", +" +
                                      std::to_string(held_numel(p.values)) + "), which is not a piece of chunk " +
                                      std::to_string(p.chunk) + " [" + std::to_string(c.lo) + ", " +
                                      std::to_string(c.hi) + ")"};
  const int phase = static_cast<int>(p.phase);
  if (got_[phase][p.chunk][static_cast<std::size_t>(k)])
    return fault{errc::duplicate, from + " repeats piece " + std::to_string(k) + " of chunk " +
                                      std::to_string(p.chunk) + " in the " + std::string(name_of(p.phase))};
  if (p.phase == ring_phase::all_gather && reduces_) {
    // The reduced values may only land once this rank's own values went into them.
    const bool own_sent = receives(ring_phase::reduce_scatter, p.chunk)
                              ? bool(got_[0][p.chunk][static_cast<std::size_t>(k)])
                              : started_;
    if (!own_sent)
      return fault{errc::malformed, from + " brings the all-gather of piece " + std::to_string(k) + " of chunk " +
                                        std::to_string(p.chunk) + " before this rank's values went into it"};
  }
  return std::nullopt;
}

void combine_values(reduce_op op, float* out, const float* a, const float* b, std::int64_t n) {
  switch (op) {
    case reduce_op::max:
      for (std::int64_t i = 0; i < n; ++i) out[i] = (a[i] > b[i] || std::isnan(a[i])) ? a[i] : b[i];
      return;
    case reduce_op::min:
      for (std::int64_t i = 0; i < n; ++i) out[i] = (a[i] < b[i] || std::isnan(a[i])) ? a[i] : b[i];
      return;
    case reduce_op::product:
      for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
      return;
    case reduce_op::sum:
    case reduce_op::avg:
      for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      return;
  }
}

void ring_collective::combine(float* out, const float* in, const float* own, std::int64_t n) const {
  // What the ranks before this one made of the chunk, then this rank's value: the order of Note [The ring].
  combine_values(op_, out, in, own, n);
}

ring_collective::outcome ring_collective::receive(ring_piece p) {
  outcome out;
  if ((out.refused = refusal(p))) return out;
  const chunk& c = chunks_[p.chunk];
  const std::int64_t k = (p.offset - c.lo) / spec_.piece_elems, numel = p.values.numel();
  got_[static_cast<int>(p.phase)][p.chunk][static_cast<std::size_t>(k)] = true;
  --missing_;
  if (p.phase == ring_phase::reduce_scatter) --scatter_missing_;
  const tensor_view dst = values_.flat(p.offset, numel);
  const bool last_hop = hops(p.phase, p.chunk) == spec_.world - 1;
  tensor next = last_hop ? tensor{} : buffer(numel);  // where the piece passed on goes, if not in p
  if (p.phase == ring_phase::all_gather) {
    copy(dst, p.values);
    if (last_hop) return out;
    if (next.empty()) out.send.push_back(std::move(p));  // passed on as it came
    else out.send.push_back(piece(p.phase, p.chunk, p.offset, numel, std::move(next)));
    return out;
  }
  float* in = p.values.data<float>();
  if (!last_hop) {
    // The running sum goes on in the piece passed on: this rank's own values of the
    // chunk are overwritten by its all-gather, so they need not hold the partial sum.
    if (next.empty()) {
      combine(in, in, dst.data<float>(), numel);
      out.send.push_back(std::move(p));
    } else {
      combine(next.data<float>(), in, dst.data<float>(), numel);
      out.send.push_back(piece(p.phase, p.chunk, p.offset, numel, std::move(next), false));
    }
    return out;
  }
  // This rank owns the chunk: the piece is whole; it starts its all-gather.
  float* d = dst.data<float>();
  combine(d, in, d, numel);
  if (op_ == reduce_op::avg) {
    const float w = static_cast<float>(spec_.world);
    for (std::int64_t i = 0; i < numel; ++i) d[i] /= w;
  }
  out.send.push_back(piece(ring_phase::all_gather, p.chunk, p.offset, numel));
  return out;
}

}  // namespace troupe
