// collective_rounds: a shard's rounds of collective pieces (Note [Collectives on the shards]).
#include "core/collective_rounds.hpp"

#include <algorithm>
#include <cmath>

#include "core/kv_layout.hpp"

namespace troupe {

namespace {

bool all_finite(const tensor& t) {
  const std::int64_t n = held_numel(t);
  const float* p = n ? t.data<float>() : nullptr;
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

std::string_view kind_name(collective_kind k) {
  switch (k) {
    case collective_kind::reduce: return "allreduce";
    case collective_kind::broadcast: return "broadcast";
    case collective_kind::allgather: return "allgather";
    case collective_kind::sizes: return "size exchange";
  }
  return "collective";
}

// "allreduce (sum) of 12 elements", "broadcast from rank 2 of 12 elements".
std::string describe(const kv_collective& c) {
  std::string s(kind_name(c.kind));
  if (c.kind == collective_kind::reduce) s += " (" + std::string(name_of(c.op)) + ")";
  if (c.kind == collective_kind::broadcast) s += " from rank " + std::to_string(c.root);
  if (c.kind == collective_kind::reduce || c.kind == collective_kind::broadcast)
    s += " of " + std::to_string(c.dims.empty() ? 0 : c.dims[0]) + " elements";
  return s;
}

}  // namespace

void collective_rounds::start(const std::vector<std::uint32_t>& members) {
  started_ = true;
  live_.insert(members.begin(), members.end());
}

void collective_rounds::member_joined(std::uint32_t member) { live_.insert(member); }

void collective_rounds::member_left(std::uint32_t member) {
  live_.erase(member);
  std::vector<std::string> lost;
  for (const auto& [name, r] : rounds_)
    if (r.waits_for.count(member) && !r.pieces.count(member)) lost.push_back(name);
  for (const auto& name : lost)
    fail(name, {errc::member_lost, "member " + std::to_string(member) + " left the job before it gave its piece of " +
                                       "collective \"" + name + "\""});
  for (auto it = failed_.begin(); it != failed_.end();) {
    it->second.untold.erase(member);
    it = it->second.untold.empty() ? failed_.erase(it) : std::next(it);
  }
}

std::optional<fault> collective_rounds::check(const kv_collective& c) const {
  if (!started_) return fault{errc::not_started, "this shard has no members yet"};
  if (!live_.count(c.worker))
    return fault{errc::not_member, "member " + std::to_string(c.worker) + " is not a live member of this job"};
  if (c.kind > last_collective_kind || c.op > last_reduce_op)
    return fault{errc::malformed, "a collective piece of an unknown kind or reduction"};
  if (c.name.empty()) return fault{errc::bad_job, "a collective piece without a name"};
  if (!c.data.empty() && c.data.type() != dtype::f32)
    return fault{errc::bad_dtype, "collective \"" + c.name + "\": pieces are float32, not " +
                                      std::string(name_of(c.data.type()))};
  const std::int64_t given = held_numel(c.data);
  if (c.kind == collective_kind::sizes) {
    const bool ok = c.dims.size() <= static_cast<std::size_t>(shape::max_rank) &&
                    std::all_of(c.dims.begin(), c.dims.end(), [](std::int64_t d) { return d >= 0; });
    if (!ok || given != 0)
      return fault{errc::bad_shape, "collective \"" + c.name + "\": a shape of at most " +
                                        std::to_string(shape::max_rank) + " extents >= 0, and no data, is expected"};
    return std::nullopt;
  }
  if (c.dims.size() != 1 || c.dims[0] < 0 || c.dims[0] > kv_max_message_floats)
    return fault{errc::bad_shape, "collective \"" + c.name + "\": a piece states its element count, 0 to " +
                                      std::to_string(kv_max_message_floats) + ", not " + dims_str(c.dims)};
  const bool carries = c.kind != collective_kind::broadcast || c.worker == c.root;
  if (given != (carries ? c.dims[0] : 0))
    return fault{errc::bad_shape, "collective \"" + c.name + "\": rank " + std::to_string(c.worker) + " gave " +
                                      std::to_string(given) + " elements for a " + describe(c)};
  if (c.kind == collective_kind::broadcast && !live_.count(c.root))
    return fault{errc::member_lost,
                 "collective \"" + c.name + "\": the broadcast's root, rank " + std::to_string(c.root) +
                     ", is not a live member"};
  return std::nullopt;
}

std::optional<std::string> collective_rounds::disagreement(const kv_collective& first, const kv_collective& c) const {
  bool same = first.kind == c.kind;
  if (same && c.kind == collective_kind::reduce) same = first.op == c.op && first.dims == c.dims;
  if (same && c.kind == collective_kind::broadcast) same = first.root == c.root && first.dims == c.dims;
  if (same) return std::nullopt;
  return "collective \"" + c.name + "\": rank " + std::to_string(c.worker) + " asks for a " + describe(c) +
         " but rank " + std::to_string(first.worker) + " for a " + describe(first) +
         "; every member must make the same calls in the same order";
}

std::size_t collective_rounds::open_pieces_of(std::uint32_t member) const {
  std::size_t n = 0;
  for (const auto& [name, r] : rounds_) n += r.pieces.count(member);
  return n;
}

std::optional<fault> collective_rounds::give(token t, kv_collective c) {
  if (auto f = check(c)) return f;
  if (auto it = failed_.find(c.name); it != failed_.end()) {
    const fault why = it->second.why;
    it->second.untold.erase(c.worker);
    if (it->second.untold.empty()) failed_.erase(it);
    return why;
  }
  if (open_pieces_of(c.worker) >= max_open_)
    return fault{errc::bad_job, "member " + std::to_string(c.worker) + " has " + std::to_string(max_open_) +
                                    " collective pieces waiting for the others already; wait for some first"};
  auto it = rounds_.find(c.name);
  if (it != rounds_.end()) {
    const round& r = it->second;
    if (!r.waits_for.count(c.worker))
      return fault{errc::not_member, "member " + std::to_string(c.worker) + " joined after collective \"" + c.name +
                                         "\" began; it takes part in the ones that begin after its join"};
    if (r.pieces.count(c.worker))
      return fault{errc::duplicate, "member " + std::to_string(c.worker) + " gave its piece of collective \"" + c.name +
                                        "\" twice"};
    if (auto why = disagreement(r.first, c)) return spoil(c, {errc::bad_shape, *why});
  }
  if (c.kind == collective_kind::reduce && !all_finite(c.data))
    return spoil(c, {errc::not_finite, "collective \"" + c.name + "\": rank " + std::to_string(c.worker) +
                                           "'s piece holds NaN or infinity"});
  if (it == rounds_.end()) {
    round r;
    r.waits_for = live_;
    it = rounds_.emplace(c.name, std::move(r)).first;
    it->second.first = c;  // data and all: moved into pieces below, so the copy is cheap to keep
    it->second.first.data = tensor{};
  }
  round& r = it->second;
  r.pieces.emplace(c.worker, piece{t, std::move(c.data), std::move(c.dims)});
  if (std::all_of(r.waits_for.begin(), r.waits_for.end(), [&](std::uint32_t m) { return r.pieces.count(m) > 0; }))
    close(it->first);
  return std::nullopt;
}

fault collective_rounds::spoil(const kv_collective& c, const fault& why) {
  if (rounds_.count(c.name)) {
    fail(c.name, why);
  } else {
    failure f{why, live_};
    if (!f.untold.empty()) failed_.emplace(c.name, std::move(f));
  }
  if (auto f = failed_.find(c.name); f != failed_.end()) {
    f->second.untold.erase(c.worker);
    if (f->second.untold.empty()) failed_.erase(f);
  }
  return why;
}

void collective_rounds::fail(const std::string& name, const fault& why) {
  auto it = rounds_.find(name);
  if (it == rounds_.end()) return;
  failure f{why, {}};
  for (auto m : it->second.waits_for)
    if (!it->second.pieces.count(m) && live_.count(m)) f.untold.insert(m);
  for (auto& [rank, p] : it->second.pieces) answers_.push_back({p.t, why});
  rounds_.erase(it);
  if (!f.untold.empty()) failed_.emplace(name, std::move(f));
}

void collective_rounds::close(const std::string& name) {
  auto it = rounds_.find(name);
  round& r = it->second;
  auto reply = std::make_shared<kv_collective_reply>();
  for (const auto& [rank, p] : r.pieces) reply->ranks.push_back(rank);
  switch (r.first.kind) {
    case collective_kind::reduce: {
      const std::int64_t n = r.first.dims[0];
      tensor out(shape{n});
      float* o = out.data<float>();
      bool first = true;
      for (const auto& [rank, p] : r.pieces) {  // ascending rank: the same bits every time
        const float* x = n ? p.data.data<float>() : nullptr;
        if (first)
          std::copy(x, x + n, o);
        else
          combine_values(r.first.op, o, o, x, n);
        first = false;
      }
      if (r.first.op == reduce_op::avg) {
        const float k = static_cast<float>(r.pieces.size());
        for (std::int64_t i = 0; i < n; ++i) o[i] /= k;
      }
      reply->data = std::move(out);
      break;
    }
    case collective_kind::broadcast:
      reply->data = std::move(r.pieces.at(r.first.root).data);
      break;
    case collective_kind::allgather: {
      std::int64_t total = 0;
      for (const auto& [rank, p] : r.pieces) total += held_numel(p.data);
      tensor out(shape{total});
      std::int64_t at = 0;
      for (const auto& [rank, p] : r.pieces) {
        const std::int64_t n = held_numel(p.data);
        if (n) std::copy_n(p.data.data<float>(), n, out.data<float>() + at);
        reply->dims.push_back({n});
        at += n;
      }
      reply->data = std::move(out);
      break;
    }
    case collective_kind::sizes:
      for (const auto& [rank, p] : r.pieces) reply->dims.push_back(p.dims);
      break;
  }
  for (const auto& [rank, p] : r.pieces) answers_.push_back({p.t, reply});
  rounds_.erase(it);
}

std::vector<collective_rounds::answer> collective_rounds::take_answers() { return std::exchange(answers_, {}); }

}  // namespace troupe
