// local_transport: in-process shards shared by a local group, behind one lock.
#include "client/local_transport.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "core/collective_rounds.hpp"

namespace troupe::kv {

namespace {

// What the workers of one group share: the key registry, the shard cores, the pulls
// the shards hold, and the barrier.
struct hub {
  explicit hub(const local_group_config& c, std::uint32_t workers) : cfg(c), registry(c.servers, c.big_array_bound) {
    for (std::uint32_t s = 0; s < c.servers; ++s) {
      shard_config sc;
      sc.index = s;
      sc.mode = c.mode;
      sc.staleness = c.staleness;
      sc.rule_keeps_lr = true;
      sc.has_optimizer = false;  // until a worker sets one
      shards.emplace_back(sc);
    }
    std::vector<std::uint32_t> ranks;
    for (std::uint32_t r = 0; r < workers; ++r) ranks.push_back(r), live.insert(r);
    for (auto& s : shards) s.start(ranks);
    collectives.start(ranks);
    total = workers;
  }

  struct request {
    std::uint32_t member = 0;
    std::vector<pull_part> parts;
    std::vector<part_result> results;
    std::size_t waiting = 0;
    std::shared_ptr<caller_memory> memory;
    completion done;
  };
  using ready = std::vector<std::pair<completion, std::optional<fault>>>;
  struct finished {
    completion done;
    std::optional<fault> error;
    std::vector<part_result> results;
  };

  // Answers part i of request r from shard s into the caller's memory, unless the caller
  // abandoned the call (Note [Abandoned calls]).
  void answer(std::uint32_t s, request& r, std::size_t i) {
    const pull_part& p = r.parts[i];
    const shard_core& core = shards[s];
    r.results[i] = {p.part, core.version(p.part), 0};
    const caller_memory_use use(r.memory);
    if (!use) return;
    tensor_view out = floats(p.out, p.numel);
    if (p.rows.empty())
      copy(out, core.value(p.part));
    else
      core.gather_rows(p.part, p.rows, p.row_numel, out);
  }

  // Carries out what shard s released or dropped; completions are returned to run unlocked.
  void settle(std::uint32_t s, std::vector<finished>& out) {
    for (auto t : shards[s].take_released()) {
      auto tok = tokens.find(t);
      if (tok == tokens.end()) continue;  // its request failed already
      auto [req, i] = tok->second;
      tokens.erase(tok);
      auto it = requests.find(req);
      if (it == requests.end()) continue;
      answer(s, it->second, i);
      if (--it->second.waiting == 0) {
        out.push_back({std::move(it->second.done), std::nullopt, std::move(it->second.results)});
        requests.erase(it);
      }
    }
    for (auto t : shards[s].take_dropped()) {
      auto tok = tokens.find(t);
      if (tok == tokens.end()) continue;
      const std::uint64_t req = tok->second.first;
      tokens.erase(tok);
      auto it = requests.find(req);
      if (it == requests.end()) continue;
      out.push_back(
          {std::move(it->second.done), fault{errc::closed, "the worker left the job while its pull was held"}, {}});
      requests.erase(it);
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  local_group_config cfg;
  kv_registry registry;
  std::vector<shard_core> shards;
  std::map<shard_core::token, std::pair<std::uint64_t, std::size_t>> tokens;
  std::map<std::uint64_t, request> requests;
  std::uint64_t next_token = 1, next_request = 1;
  std::set<std::uint32_t> live;
  std::uint32_t total = 0;
  std::uint64_t barrier_generation = 0;
  std::set<std::uint32_t> at_barrier;
  // Every piece of the group's collectives, whichever shard it names: one process.
  collective_rounds collectives;
  std::map<collective_rounds::token, std::function<void(or_fault<kv_collective_reply>)>> collective_done;
  collective_rounds::token next_collective = 1;

  // The completions of the pieces whose rounds closed or failed, to run unlocked.
  std::vector<std::function<void()>> settle_collectives() {
    std::vector<std::function<void()>> out;
    for (auto& a : collectives.take_answers()) {
      auto it = collective_done.find(a.t);
      if (it == collective_done.end()) continue;
      out.push_back([done = std::move(it->second), result = std::move(a.result)] {
        if (auto* f = std::get_if<fault>(&result))
          done(*f);
        else
          done(kv_collective_reply(*std::get<0>(result)));
      });
      collective_done.erase(it);
    }
    return out;
  }
};

void run(std::vector<hub::finished>& done) {
  for (auto& f : done) f.done(std::move(f.error), std::move(f.results));
}

class local_transport final : public kv_transport {
 public:
  local_transport(std::shared_ptr<hub> h, std::uint32_t rank) : hub_(std::move(h)), rank_(rank) {}
  ~local_transport() override { close(); }

  std::uint32_t rank() const override { return rank_; }
  std::uint32_t workers() const override { return hub_->total; }
  sync_mode mode() const override { return hub_->cfg.mode; }
  std::uint32_t shards() const override { return static_cast<std::uint32_t>(hub_->shards.size()); }

  or_fault<kv_key_layout> init(const std::string& name, const std::vector<std::int64_t>& dims,
                               const_tensor_view initial) override {
    std::lock_guard lock(hub_->mu);
    auto out = hub_->registry.init(name, dims);
    if (out.error) return *out.error;
    const kv_key_layout& k = *out.layout;
    if (out.created) {
      const std::int64_t row = k.row_numel();
      for (const auto& p : k.parts)
        if (auto e = hub_->shards[p.shard].define(p.id, name, initial.flat(p.row_begin * row, p.numel))) return *e;
    }
    return k;
  }

  or_fault<kv_key_layout> lookup(const std::string& name) override {
    std::lock_guard lock(hub_->mu);
    if (const kv_key_layout* k = hub_->registry.find(name)) return *k;
    return fault{errc::no_such_key, "key " + kv_key_display(name) + " was never initialised; call init first"};
  }

  // Applies the push before it returns: the caller's arrays are not used afterwards.
  void push(std::uint32_t shard, std::vector<push_part> parts, std::shared_ptr<caller_memory> /*memory*/,
            completion done) override {
    std::vector<hub::finished> finished;
    {
      std::lock_guard lock(hub_->mu);
      std::vector<kv_part_id> ids;
      std::vector<std::int64_t> base_versions;
      std::vector<const_tensor_view> grads;
      for (const auto& p : parts) {
        ids.push_back(p.part);
        base_versions.push_back(p.base_version);
        grads.push_back(floats(p.data, p.numel));
      }
      auto r = hub_->shards[shard].push_parts(rank_, ids, base_versions, grads);  // all parts or none
      std::vector<part_result> results;
      for (std::size_t i = 0; i < r.versions.size(); ++i) results.push_back({ids[i], r.versions[i], r.staleness[i]});
      hub_->settle(shard, finished);
      finished.push_back({std::move(done), std::move(r.error), std::move(results)});
    }
    run(finished);
  }

  void pull(std::uint32_t shard, std::vector<pull_part> parts, std::shared_ptr<caller_memory> memory,
            completion done) override {
    std::vector<hub::finished> finished;
    {
      std::lock_guard lock(hub_->mu);
      const std::uint64_t id = hub_->next_request++;
      hub::request r;
      r.member = rank_;
      r.parts = std::move(parts);
      r.results.resize(r.parts.size());
      r.memory = std::move(memory);
      r.done = std::move(done);
      std::optional<fault> error;
      std::vector<shard_core::token> held;
      for (std::size_t i = 0; i < r.parts.size() && !error; ++i) {
        const auto t = hub_->next_token++;
        auto o = hub_->shards[shard].pull_part(rank_, r.parts[i].part, t);
        if (o.decision == shard_core::pull_decision::reject) {
          error = o.error;
        } else if (o.decision == shard_core::pull_decision::answer) {
          hub_->answer(shard, r, i);
        } else {
          hub_->tokens[t] = {id, i};
          held.push_back(t);
          ++r.waiting;
        }
      }
      if (error || r.waiting == 0) {
        for (auto t : held) hub_->tokens.erase(t);  // a held pull of a failed request is answered into nothing
        finished.push_back({std::move(r.done), error, error ? std::vector<part_result>{} : std::move(r.results)});
      } else {
        hub_->requests.emplace(id, std::move(r));
      }
    }
    run(finished);
  }

  std::optional<fault> set_optimizer(const std::optional<kv_optimizer>& opt) override {
    std::lock_guard lock(hub_->mu);
    for (auto& s : hub_->shards) s.set_optimizer(opt);
    return std::nullopt;
  }

  std::optional<fault> barrier(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(hub_->mu);
    const auto generation = hub_->barrier_generation;
    hub_->at_barrier.insert(rank_);
    if (release_barrier_if_full()) return std::nullopt;
    if (hub_->cv.wait_for(lock, timeout, [&] { return hub_->barrier_generation != generation; })) return std::nullopt;
    hub_->at_barrier.erase(rank_);
    return fault{errc::timed_out, "barrier: " + std::to_string(hub_->at_barrier.size() + 1) + " of " +
                                      std::to_string(hub_->live.size()) + " workers arrived within " +
                                      std::to_string(timeout.count()) + " ms"};
  }

  // Runs the completion on the thread whose piece closed the round; the store bounds the
  // wait.
  void collective(std::uint32_t /*shard*/, kv_collective piece, const float* data, std::int64_t /*answer_numel*/,
                  std::chrono::milliseconds /*timeout*/,
                  std::function<void(or_fault<kv_collective_reply>)> done) override {
    if (data && !piece.dims.empty() && piece.dims[0] > 0) {
      piece.data = tensor::uninitialized({piece.dims[0]});
      std::copy_n(data, piece.dims[0], piece.data.data<float>());
    }
    std::vector<std::function<void()>> settled;
    {
      std::lock_guard lock(hub_->mu);
      piece.worker = rank_;
      const auto t = hub_->next_collective++;
      if (auto f = hub_->collectives.give(t, std::move(piece)))
        settled.push_back([done, f = *f] { done(f); });  // it may have failed the others' pieces too
      else
        hub_->collective_done.emplace(t, std::move(done));
      for (auto& f : hub_->settle_collectives()) settled.push_back(std::move(f));
    }
    for (auto& f : settled) f();
  }

  void close() override {
    std::vector<hub::finished> finished;
    std::vector<std::function<void()>> settled;
    {
      std::lock_guard lock(hub_->mu);
      if (!hub_->live.erase(rank_)) return;
      hub_->at_barrier.erase(rank_);
      for (std::uint32_t s = 0; s < hub_->shards.size(); ++s) {
        hub_->shards[s].member_left(rank_);
        hub_->settle(s, finished);
      }
      hub_->collectives.member_left(rank_);
      settled = hub_->settle_collectives();
      release_barrier_if_full();
    }
    run(finished);
    for (auto& f : settled) f();
  }

 private:
  bool release_barrier_if_full() {  // with hub_->mu held
    if (hub_->at_barrier.empty() || hub_->at_barrier.size() < hub_->live.size()) return false;
    hub_->at_barrier.clear();
    ++hub_->barrier_generation;
    hub_->cv.notify_all();
    return true;
  }

  std::shared_ptr<hub> hub_;
  std::uint32_t rank_;
};

}  // namespace

std::vector<std::unique_ptr<kv_transport>> make_local_group(const local_group_config& cfg, std::uint32_t workers) {
  auto h = std::make_shared<hub>(cfg, workers);
  std::vector<std::unique_ptr<kv_transport>> out;
  for (std::uint32_t r = 0; r < workers; ++r) out.push_back(std::make_unique<local_transport>(h, r));
  return out;
}

}  // namespace troupe::kv
