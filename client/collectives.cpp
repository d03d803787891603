// collectives: cutting a store's collective calls into pieces over the shards, and
// putting the answers back; with no shards, the calls round the members' ring.
#include "client/collectives.hpp"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "client/caller_memory.hpp"
#include "tensor/ops.hpp"

namespace troupe::kv {

namespace {

using steady = std::chrono::steady_clock;
using take_answer = std::function<std::optional<fault>(std::size_t piece, kv_collective_reply& reply)>;

std::int64_t product(const std::vector<std::int64_t>& d) {
  std::int64_t n = 1;
  for (auto x : d) n *= x;
  return n;
}

// The pieces of one call, and the wait for their answers.
struct gate {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t left = 0;
  std::optional<fault> error;
  std::shared_ptr<caller_memory> memory = std::make_shared<caller_memory>();
};

// Sends piece i, with the floats at data[i] (none when absent or null), to shard
// i mod shards (its answer answer_numel[i] elements, 0: unknown) and runs `take` on each
// answer while the caller's arrays are still its to use; returns once all are taken, one
// failed, or the call's time is up. Afterwards no answer is taken.
std::optional<fault> exchange(kv_transport& t, const collective_call& call, std::vector<kv_collective> pieces,
                              std::vector<const float*> data, std::vector<std::int64_t> answer_numel,
                              take_answer take) {
  auto g = std::make_shared<gate>();
  g->left = pieces.size();
  const std::size_t total = pieces.size();
  const auto deadline = steady::now() + call.timeout;
  const std::uint32_t shards = std::max<std::uint32_t>(1, t.shards());
  for (std::size_t i = 0; i < total; ++i) {
    pieces[i].name = call.name + "/" + pieces[i].name;
    const std::int64_t answer = i < answer_numel.size() ? answer_numel[i] : 0;
    const float* from = i < data.size() ? data[i] : nullptr;
    t.collective(static_cast<std::uint32_t>(i % shards), std::move(pieces[i]), from, answer, call.timeout,
                 [g, i, take](or_fault<kv_collective_reply> r) {
                   std::optional<fault> err;
                   if (auto* f = std::get_if<fault>(&r)) {
                     err = *f;
                   } else {
                     const caller_memory_use use(g->memory);
                     if (use) err = take(i, std::get<kv_collective_reply>(r));
                   }
                   std::lock_guard lock(g->mu);
                   if (err && !g->error) g->error = std::move(err);
                   if (--g->left == 0 || g->error) g->cv.notify_all();
                 });
  }
  std::unique_lock lock(g->mu);
  g->cv.wait_until(lock, deadline, [&] { return g->left == 0 || g->error; });
  std::optional<fault> out = g->error;
  const std::size_t left = g->left;
  lock.unlock();
  if (!out && left == 0) return std::nullopt;
  g->memory->revoke();
  if (out) return out;
  return fault{errc::timed_out, "collective \"" + call.name + "\": " + std::to_string(total - left) + " of " +
                                    std::to_string(total) + " pieces answered within " +
                                    std::to_string(call.timeout.count()) +
                                    " ms; is every member making the same collective calls in the same order?"};
}

// n elements cut into pieces of at most `bound`, spread over `shards`: [offset, count).
std::vector<std::pair<std::int64_t, std::int64_t>> cut(std::int64_t n, std::uint32_t shards, std::int64_t bound) {
  const std::int64_t per_shard = (n + shards - 1) / std::max<std::uint32_t>(1, shards);
  const std::int64_t len = std::clamp<std::int64_t>(per_shard, 1, std::max<std::int64_t>(1, bound));
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::int64_t lo = 0; lo < n; lo += len) out.emplace_back(lo, std::min(len, n - lo));
  if (out.empty()) out.emplace_back(0, 0);  // an empty tensor still meets the others
  return out;
}

fault wrong_answer(const collective_call& call, std::size_t piece, const std::string& what) {
  return {errc::malformed, "collective \"" + call.name + "\": the answer to piece " + std::to_string(piece) + " " + what};
}

// An elementwise call (allreduce, broadcast): n elements cut into pieces like `like`
// (kind, op, root), each carrying its floats of `in` (null: none) and its answer written
// into `out` (null: not wanted).
std::optional<fault> elementwise(kv_transport& t, const collective_call& call, const kv_collective& like,
                                 const float* in, float* out, std::int64_t n) {
  const auto ranges = cut(n, t.shards(), call.piece_bound);
  std::vector<kv_collective> pieces;
  std::vector<const float*> data;
  std::vector<std::int64_t> answers;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const auto [lo, m] = ranges[i];
    data.push_back(in ? in + lo : nullptr);
    answers.push_back(out ? m : 0);
    kv_collective c = like;
    c.name = std::to_string(i);
    c.dims = {m};
    pieces.push_back(std::move(c));
  }
  return exchange(t, call, std::move(pieces), std::move(data), std::move(answers),
                  [&call, ranges, out](std::size_t i, kv_collective_reply& r) -> std::optional<fault> {
                    if (!out) return std::nullopt;
                    const auto [lo, m] = ranges[i];
                    if (held_numel(r.data) != m) return wrong_answer(call, i, "does not hold " + std::to_string(m) + " elements");
                    if (m) std::copy_n(r.data.data<float>(), m, out + lo);
                    return std::nullopt;
                  });
}

// --mode allreduce with a command: the call round the members' ring (Note [A ring of
// users' loops] in client/kv_member_ring.cpp), on a copy of `in` whose result goes to
// `out` (null: not wanted).
or_fault<tensor> ring_call(kv_transport& t, const collective_call& call, std::uint8_t kind, const float* in,
                           std::int64_t n, reduce_op op, std::uint32_t root, std::vector<std::int64_t> counts = {}) {
  kv_transport::ring_request r;
  r.kind = kind;
  r.name = call.name;
  r.op = op;
  r.root = root;
  r.values = tensor::uninitialized(shape{n});
  if (n && in) std::copy_n(in, n, r.values.data<float>());
  r.counts = std::move(counts);
  r.timeout = call.timeout;
  return t.ring(std::move(r));
}

// A reduction whose result holds NaN or infinity fails on every member with not_finite,
// as on the shards; it is found in the result, so every member finishes the call first and
// the ring stays in step.
std::optional<fault> ring_elementwise(kv_transport& t, const collective_call& call, std::uint8_t kind, const float* in,
                                      float* out, std::int64_t n, reduce_op op, std::uint32_t root) {
  auto r = ring_call(t, call, kind, in, n, op, root);
  if (auto* f = std::get_if<fault>(&r)) return *f;
  const tensor& v = std::get<tensor>(r);
  if (v.numel() != n) return wrong_answer(call, 0, "does not hold " + std::to_string(n) + " elements");
  if (kind == 0 && !all_finite(v.view())) {
    const bool mine = in && !all_finite(floats(in, n));
    return fault{errc::not_finite, "collective \"" + call.name + "\": " +
                                       (mine ? std::string("this worker's tensor holds") : "another worker's tensor holds") +
                                       " NaN or infinite values, so the reduction does; nothing was written"};
  }
  if (out && n) std::copy_n(v.data<float>(), n, out);
  return std::nullopt;
}

bool rings(const kv_transport& t) { return t.shards() == 0 && t.mode() == sync_mode::allreduce; }

}  // namespace

std::optional<fault> run_allreduce(kv_transport& t, const collective_call& call, const float* in, float* out,
                                   std::int64_t n, reduce_op op) {
  if (rings(t)) return ring_elementwise(t, call, 0, in, out, n, op, 0);
  kv_collective like;
  like.kind = collective_kind::reduce;
  like.op = op;
  return elementwise(t, call, like, in, out, n);
}

// The root's answer carries no data (the shard sends it none): it has the values.
std::optional<fault> run_broadcast(kv_transport& t, const collective_call& call, float* value, std::int64_t n,
                                   std::uint32_t root) {
  if (rings(t)) return ring_elementwise(t, call, 1, value, value, n, reduce_op::sum, root);
  kv_collective like;
  like.kind = collective_kind::broadcast;
  like.root = root;
  const bool is_root = t.rank() == root;
  return elementwise(t, call, like, is_root ? value : nullptr, is_root ? nullptr : value, n);
}

namespace {

// In a ring, every member's shape as a block of 1 + 2 * ring_most_dims floats: the
// number of dimensions, then each as two 24-bit halves (exact in a float).
constexpr std::size_t ring_most_dims = 7;

or_fault<kv_collective_reply> ring_shapes(kv_transport& t, const collective_call& call,
                                          const std::vector<std::int64_t>& dims) {
  constexpr std::int64_t block = 1 + 2 * ring_most_dims, half = std::int64_t{1} << 24;
  if (dims.size() > ring_most_dims || std::any_of(dims.begin(), dims.end(), [](auto d) { return d >= half * half; }))
    return fault{errc::bad_shape, "allgather \"" + call.name + "\": shape " + dims_str(dims) + " has more than " +
                                      std::to_string(ring_most_dims) + " dimensions or one of 2^48 or more"};
  std::vector<float> mine(block, 0.f);
  mine[0] = static_cast<float>(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    mine[1 + 2 * i] = static_cast<float>(dims[i] / half);
    mine[2 + 2 * i] = static_cast<float>(dims[i] % half);
  }
  const std::uint32_t world = t.workers();
  collective_call sizes = call;
  sizes.name += "/sizes";
  auto r = ring_call(t, sizes, 2, mine.data(), block, reduce_op::sum, 0, std::vector<std::int64_t>(world, block));
  if (auto* f = std::get_if<fault>(&r)) return *f;
  const tensor& all = std::get<tensor>(r);
  if (all.numel() != block * world) return wrong_answer(call, 0, "of the shapes does not hold every worker's");
  kv_collective_reply shapes;
  const float* x = all.data<float>();
  for (std::uint32_t j = 0; j < world; ++j, x += block) {
    shapes.ranks.push_back(j);
    std::vector<std::int64_t> d(static_cast<std::size_t>(std::clamp<float>(x[0], 0.f, ring_most_dims)));
    for (std::size_t i = 0; i < d.size(); ++i)
      d[i] = static_cast<std::int64_t>(x[1 + 2 * i]) * half + static_cast<std::int64_t>(x[2 + 2 * i]);
    shapes.dims.push_back(std::move(d));
  }
  return shapes;
}

// An allgather's first round: every member's shape, so that each knows where every
// element lands.
or_fault<kv_collective_reply> gather_shapes(kv_transport& t, const collective_call& call,
                                            const std::vector<std::int64_t>& dims) {
  if (rings(t)) return ring_shapes(t, call, dims);
  kv_collective_reply shapes;
  kv_collective sizes;
  sizes.name = "sizes";
  sizes.kind = collective_kind::sizes;
  sizes.dims = dims;
  std::vector<kv_collective> first;
  first.push_back(std::move(sizes));
  if (auto f = exchange(t, call, std::move(first), {}, {}, [&shapes](std::size_t, kv_collective_reply& r) {
        shapes = std::move(r);
        return std::optional<fault>();
      }))
    return *f;
  return shapes;
}

// Where each member's elements land in the gathered tensor.
struct gather_layout {
  std::shared_ptr<gathered_tensor> out = std::make_shared<gathered_tensor>();  // sized, zeros
  std::vector<std::int64_t> counts, offsets;  // per member, in rank order
  std::int64_t largest = 0;                   // the most elements one member gives
};

or_fault<gather_layout> lay_out(const kv_collective_reply& shapes, const std::vector<std::int64_t>& dims,
                                std::uint32_t rank, const collective_call& call) {
  const std::size_t members = shapes.ranks.size();
  if (shapes.dims.size() != members || members == 0)
    return wrong_answer(call, 0, "names " + std::to_string(members) + " members but " +
                                     std::to_string(shapes.dims.size()) + " shapes");
  gather_layout l;
  l.out->ranks = shapes.ranks;
  std::int64_t total = 0, rows = 0;
  for (std::size_t j = 0; j < members; ++j) {
    const auto& d = shapes.dims[j];
    const bool same_tail = d.size() == dims.size() && std::equal(d.begin() + 1, d.end(), dims.begin() + 1);
    if (!same_tail)
      return fault{errc::bad_shape, "allgather \"" + call.name + "\": rank " + std::to_string(shapes.ranks[j]) +
                                        " gives shape " + dims_str(d) + " and rank " + std::to_string(rank) + " " +
                                        dims_str(dims) + "; every dimension but the first must agree"};
    l.counts.push_back(product(d));
    l.offsets.push_back(total);
    total += l.counts.back();
    l.largest = std::max(l.largest, l.counts.back());
    rows += d[0];
    l.out->rows.push_back(d[0]);
  }
  l.out->dims = dims;
  l.out->dims[0] = rows;
  l.out->data.assign(static_cast<std::size_t>(total), 0.f);
  return l;
}

}  // namespace

or_fault<gathered_tensor> run_allgather(kv_transport& t, const collective_call& call, const float* in,
                                        const std::vector<std::int64_t>& dims) {
  if (dims.empty())
    return fault{errc::bad_shape, "allgather \"" + call.name + "\" concatenates along the first dimension; a scalar has none"};
  auto shapes = gather_shapes(t, call, dims);
  if (auto* f = std::get_if<fault>(&shapes)) return *f;
  auto laid = lay_out(std::get<kv_collective_reply>(shapes), dims, t.rank(), call);
  if (auto* f = std::get_if<fault>(&laid)) return *f;
  const gather_layout& l = std::get<gather_layout>(laid);
  if (rings(t)) {  // the blocks come in rank order, where the layout puts them
    auto r = ring_call(t, call, 2, in, product(dims), reduce_op::sum, 0, l.counts);
    if (auto* f = std::get_if<fault>(&r)) return *f;
    const tensor& all = std::get<tensor>(r);
    if (all.numel() != static_cast<std::int64_t>(l.out->data.size()))
      return wrong_answer(call, 0, "does not hold every worker's elements");
    std::copy_n(all.data<float>(), all.numel(), l.out->data.data());
    return std::move(*l.out);
  }
  const auto out = l.out;
  const std::vector<std::int64_t> counts = l.counts, offsets = l.offsets;
  const std::int64_t largest = l.largest;
  const std::size_t members = counts.size();
  // Then the elements, in pieces whose answers (one slice from each member) fit a message.
  const std::int64_t chunk = std::max<std::int64_t>(1, call.piece_bound / static_cast<std::int64_t>(members));
  const std::int64_t mine = product(dims);
  const std::size_t n_pieces = static_cast<std::size_t>(std::max<std::int64_t>(1, (largest + chunk - 1) / chunk));
  std::vector<kv_collective> pieces;
  std::vector<const float*> data;
  std::vector<std::int64_t> answers;
  for (std::size_t i = 0; i < n_pieces; ++i) {
    std::int64_t answer = 0;  // every member's slice of this piece
    for (auto count : counts) answer += std::min(chunk, count - std::min(count, static_cast<std::int64_t>(i) * chunk));
    answers.push_back(answer);
    const std::int64_t lo = std::min(mine, static_cast<std::int64_t>(i) * chunk);
    const std::int64_t m = std::min(chunk, mine - lo);
    kv_collective c;
    c.name = std::to_string(i);
    c.kind = collective_kind::allgather;
    c.dims = {m};
    data.push_back(in + lo);
    pieces.push_back(std::move(c));
  }
  auto f = exchange(t, call, std::move(pieces), std::move(data), std::move(answers),
                    [&call, out, counts, offsets, chunk](std::size_t i, kv_collective_reply& r) -> std::optional<fault> {
                      if (r.ranks != out->ranks || r.dims.size() != counts.size())
                        return wrong_answer(call, i, "comes from other members than the shapes did; did one leave?");
                      const float* from = r.data.empty() ? nullptr : r.data.data<float>();
                      std::int64_t at = 0;
                      for (std::size_t j = 0; j < counts.size(); ++j) {
                        const std::int64_t lo = std::min(counts[j], static_cast<std::int64_t>(i) * chunk);
                        const std::int64_t m = std::min(chunk, counts[j] - lo);
                        if (r.dims[j] != std::vector<std::int64_t>{m} || at + m > held_numel(r.data))
                          return wrong_answer(call, i, "does not hold rank " + std::to_string(out->ranks[j]) +
                                                           "'s " + std::to_string(m) + " elements");
                        if (m) std::copy_n(from + at, m, out->data.data() + offsets[j] + lo);
                        at += m;
                      }
                      return std::nullopt;
                    });
  if (f) return *f;
  return std::move(*out);
}

}  // namespace troupe::kv
