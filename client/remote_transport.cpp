// remote_transport: the store's calls as member_call_* messages to a kv_member actor.
#include "client/remote_transport.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <mutex>

#include "client/borrowed_push.hpp"
#include "client/heap_returner.hpp"
#include "client/pull_answer.hpp"
#include "client/pulled_views.hpp"
#include "client/push_compressor.hpp"
#include "client/transport_waits.hpp"
#include "tensor/grad_codec.hpp"
#include "transport/shard_call.hpp"
#include "transport/shard_links.hpp"

namespace troupe::kv {

namespace {

// A user's loop has many calls in flight to one shard (troupe.torch pushes and pulls every
// parameter from its own gradient hook), so a key-value member keeps a few channels per
// shard; calls under 4,096 floats go in the message, and a new channel's slots hold 1 MiB
// at least, so small keys share channels.
constexpr shm::channel_pool::limits kv_channel_limits{4096, 8, std::size_t{1} << 20};

// What settling a call did to its channel, for the log, as a training member says it.
void log_closed(std::uint32_t shard, const char* why) {
  if (why) spdlog::info("troupe.kv: {}", shard_call::closing_note(shard, why));
}
void settle_push(shard_call& call, bool timed_out) {
  if (call.settle_push(timed_out)) log_closed(call.shard(), shard_call::why_push_closed());
}
void settle_reply(shard_call& call, bool inline_answer, bool timed_out) {
  log_closed(call.shard(), shard_call::why_closed(call.settle_reply(inline_answer, timed_out)));
}

class remote_transport final : public kv_transport {
 public:
  // owned: a node's actor system this transport keeps (null when the caller owns sys).
  // fast_path_tag: the job's tag for the same-host fast path; empty: every tensor goes in
  // the message.
  remote_transport(std::unique_ptr<caf::actor_system_config> cfg, std::unique_ptr<caf::actor_system> owned,
                   caf::actor_system& sys, member_options opts, std::string fast_path_tag)
      : cfg_(std::move(cfg)), owned_(std::move(owned)), sys_(sys), fast_path_tag_(std::move(fast_path_tag)) {
    connect_timeout_ = opts.connect_timeout;
    opts.restores = restores_;
    opts.fast_path_tag = fast_path_tag_;
    opts.links = links_;
    publish_ = opts.publish;
    member_ = spawn_kv_member(sys_, std::move(opts));
  }

  ~remote_transport() override {
    close();
    member_ = nullptr;
    owned_.reset();  // waits for the actors and flushes the connections
  }

  std::optional<fault> join(const std::string& job_id, const std::string& proof) {
    auto p = std::make_shared<std::promise<or_fault<member_assignment>>>();
    auto f = p->get_future();
    member_call_join call{job_id, proof, [p](or_fault<member_assignment> r) { p->set_value(std::move(r)); }, {}, 0};
    if (publish_) {  // Note [A ring of users' loops]
      auto at = publish_(member_);
      if (auto* e = std::get_if<fault>(&at)) return *e;
      std::tie(call.host, call.port) = std::get<std::pair<std::string, std::uint16_t>>(at);
    }
    caf::anon_send(member_, std::move(call));
    auto r = await(f, connect_timeout_ + std::chrono::seconds(5), "joining the job");
    if (auto* e = std::get_if<fault>(&r)) return *e;
    place_ = std::get<member_assignment>(std::move(r));
    if (place_.job.compression.kind != codec_kind::none) compressor_.emplace(place_.job.compression);
    if (place_.job.pull_precision.kind == codec_kind::two_bit)
      views_ = std::make_shared<pulled_views>(place_.job.pull_precision);
    links_->wire(std::vector<shard_links::reach>(place_.job.servers, shard_links::reach::other_process),
                 {fast_path_tag_, place_.rank, kv_channel_limits});
    return std::nullopt;
  }

  std::uint32_t rank() const override { return place_.rank; }
  std::uint32_t workers() const override { return place_.world; }
  sync_mode mode() const override { return place_.job.mode; }
  std::uint32_t shards() const override { return place_.job.servers; }
  std::int64_t resumed_step() const override { return place_.resume_clock; }
  std::optional<std::int64_t> restored_step() const override { return restores_->latest(); }

  or_fault<kv_key_layout> init(const std::string& name, const std::vector<std::int64_t>& dims,
                               const_tensor_view initial) override {
    // The value goes to the coordinator in chunks of at most one message each, until
    // the answer is the key's layout (kv_init: the key exists, by this init or another).
    const std::int64_t total = initial.numel();
    const std::string what = "init of key " + kv_key_display(name);
    for (std::int64_t offset = 0;;) {
      const std::int64_t n = std::min(kv_max_message_floats, total - offset);
      kv_init msg{0, name, dims, tensor::uninitialized({n}), offset};
      copy(msg.value, initial.flat(offset, n));
      auto r = blocking<kv_key_layout, member_call_init>(std::move(msg), what);
      if (std::holds_alternative<fault>(r) || !std::get<kv_key_layout>(r).parts.empty()) return r;
      offset += n;
      if (offset >= total)
        return fault{errc::malformed, what + ": the coordinator took every chunk but did not answer with the key"};
    }
  }

  or_fault<kv_key_layout> lookup(const std::string& name) override {
    return blocking<kv_key_layout, member_call_lookup>(kv_lookup{0, name}, "looking up key " + kv_key_display(name));
  }

  // A push packs the caller's floats once: into a push slot of the same-host fast path
  // when one is free, into the message otherwise (encoded, with the job's --compression),
  // or lends them to the message as they lie (Note [Borrowed pushes]).
  void push(std::uint32_t shard, std::vector<push_part> parts, std::shared_ptr<caller_memory> memory,
            completion done) override {
    heap_.maybe_trim();  // Note [Returning the heap]
    const caller_memory_use use(memory);
    if (!use) return done(abandoned(), {});
    kv_push msg;
    std::int64_t total = 0;
    for (const auto& p : parts) {
      total += p.numel;
      msg.parts.push_back(p.part);
      msg.base_versions.push_back(p.base_version);
    }
    shard_call call(links_, shard);
    tensor slot = call.push_buffer(total);
    const bool lease = !slot.empty();
    const bool plain = place_.job.compression.kind == codec_kind::none;
    const float* lent = plain && !lease ? contiguous_floats(parts) : nullptr;
    if (lent && memory->enter()) {  // left when the message lets go of the floats
      auto borrowed = std::make_shared<borrowed_push>(std::move(done), borrows_, memory);
      msg.data = borrowed_push::lend(borrowed, lent, total);
      done = [borrowed](std::optional<fault> f, std::vector<part_result> r) {
        borrowed->answered(std::move(f), std::move(r));
      };
    } else if (lease || plain) {
      if (!lease) msg.data = tensor::uninitialized({total});
      const tensor_view into = lease ? slot.view() : msg.data.view();
      std::int64_t pos = 0;
      for (const auto& p : parts) {
        copy(into.flat(pos, p.numel), floats(p.data, p.numel));
        pos += p.numel;
      }
    } else {
      msg.data = compressor_->encode_parts(parts);
    }
    if (lease) {
      msg.shared = call.route_push(slot, false);
      if (msg.shared.empty()) msg.data = std::move(slot);  // the slot could not take it: a copy goes in the message
    }
    const bool in_slot = call.holds_push_slot();
    stats_->add(in_slot, in_slot ? static_cast<std::size_t>(total) * 4 : msg.data.nbytes());
    member_call_push c;
    c.shard = shard;
    c.channel = call.push_channel();
    c.lane = over_the_network(shard);
    c.done = [done, ids = msg.parts, call](or_fault<kv_push_ack> r) mutable {
      settle_push(call, timed_out(r));
      if (auto* f = std::get_if<fault>(&r)) return done(*f, {});
      const auto& ack = std::get<kv_push_ack>(r);
      std::vector<part_result> out;
      for (std::size_t i = 0; i < ids.size() && i < ack.versions.size(); ++i)
        out.push_back({ids[i], ack.versions[i], ack.staleness[i]});
      done(std::nullopt, std::move(out));
    };
    c.msg = std::move(msg);
    caf::anon_send(member_, std::move(c));
  }

  // A pull offers a reply slot of the same-host fast path when one is free; the answer is
  // copied once, from the slot or the message, into the caller's arrays.
  void pull(std::uint32_t shard, std::vector<pull_part> parts, std::shared_ptr<caller_memory> memory,
            completion done) override {
    kv_pull msg;
    std::int64_t total = 0;
    for (const auto& p : parts) {
      msg.parts.push_back(p.part);
      msg.rows.push_back(p.rows);
      msg.row_numel.push_back(p.rows.empty() ? 0 : p.row_numel);
      total += p.numel;
    }
    shard_call call(links_, shard);
    std::string problem;
    msg.reply_to = call.offer_reply(total, &problem);
    if (!problem.empty())
      spdlog::warn("troupe.kv: no shared-memory channel to shard {} ({}); its tensors go over the network", shard,
                   problem);
    auto stats = stats_;
    auto views = views_;
    if (views) msg.full = views->needs_full(parts);
    const grad_codec precision = place_.job.pull_precision;
    member_call_pull c;
    c.shard = shard;
    c.channel = call.reply_channel();
    c.bytes = static_cast<std::size_t>(total) * sizeof(float);
    c.lane = over_the_network(shard);
    c.done = [done, parts, call, total, stats, precision, memory, views](or_fault<kv_pull_reply> r) mutable {
      if (auto* f = std::get_if<fault>(&r)) {
        settle_reply(call, false, timed_out(r));
        if (views) views->forget(parts);  // Note [2-bit key-value pulls]
        return done(*f, {});
      }
      auto& reply = std::get<kv_pull_reply>(r);
      const bool shared = !reply.shared.empty();
      const std::size_t bytes = shared ? static_cast<std::size_t>(total) * 4 : reply.data.nbytes();
      or_fault<std::vector<part_result>> got = abandoned();
      if (const caller_memory_use use(memory); use) got = unpack_pull(reply, parts, total, call, precision, views.get());
      if (views && std::holds_alternative<fault>(got)) views->forget(parts);
      settle_reply(call, !shared, false);  // copied out, or dropped: the slot is free again
      if (auto* f = std::get_if<fault>(&got)) return done(*f, {});
      stats->add(shared, bytes);
      done(std::nullopt, std::move(std::get<0>(got)));
    };
    c.msg = std::move(msg);
    caf::anon_send(member_, std::move(c));
  }

  transfer_stats transfers() const override { return stats_->get(); }

  // Whether calls to shard s go over the network (no same-host fast path to it), where a
  // bulk lane may carry them (Note [Bulk lanes]).
  bool over_the_network(std::uint32_t s) const { return links_->over_the_network(s); }

  std::optional<fault> set_optimizer(const std::optional<kv_optimizer>& opt) override {
    kv_set_optimizer msg;
    msg.has_optimizer = opt.has_value();
    if (opt) msg.config = opt->config, msg.schedule = opt->schedule;
    return blocking_ok<member_call_optimizer>(std::move(msg), request_timeout(), "set_optimizer");
  }

  std::optional<fault> barrier(std::chrono::milliseconds timeout) override {
    auto p = std::make_shared<std::promise<or_fault<bool>>>();
    auto f = p->get_future();
    caf::anon_send(member_, member_call_barrier{timeout, [p](std::optional<fault> e) {
                                                  if (e)
                                                    p->set_value(*e);
                                                  else
                                                    p->set_value(true);
                                                }});
    auto r = await(f, timeout + std::chrono::seconds(1), "barrier");
    if (auto* e = std::get_if<fault>(&r)) return *e;
    return std::nullopt;
  }

  void report_step(std::int64_t number, double busy_seconds) override {
    caf::anon_send(member_, member_call_step{number, busy_seconds});
  }

  // A piece goes in a push slot of the same-host fast path when a confirmed one is free,
  // and offers a reply slot when the answer's size is known, as pushes and pulls do;
  // otherwise on the bulk lane when it is open and the piece (or the answer) is large
  // enough, and else in the messages.
  void collective(std::uint32_t shard, kv_collective piece, const float* data, std::int64_t answer_numel,
                  std::chrono::milliseconds timeout, std::function<void(or_fault<kv_collective_reply>)> done) override {
    const std::int64_t given = data && !piece.dims.empty() ? piece.dims[0] : 0;
    shard_call call(links_, shard);
    tensor slot = given > 0 ? call.push_buffer(given) : tensor();
    if (!slot.empty()) {  // the caller's floats go once, into the slot
      copy(slot.view(), floats(data, given));
      piece.shared = call.route_push(slot, false);
      if (piece.shared.empty()) piece.data = std::move(slot);  // the slot could not take it: a copy goes in the message
    } else if (given > 0) {  // or into the message
      piece.data = tensor::uninitialized({given});
      copy(piece.data.view(), floats(data, given));
    }
    stats_->add(call.holds_push_slot(), static_cast<std::size_t>(given) * 4);
    if (answer_numel > 0) piece.reply_to = call.offer_reply(answer_numel);
    auto stats = stats_;
    caf::anon_send(
        member_, member_call_collective{
                     shard, std::move(piece), timeout,
                     [stats, call, done](or_fault<kv_collective_reply> r) mutable {
                       settle_push(call, timed_out(r));
                       auto* reply = std::get_if<kv_collective_reply>(&r);
                       const bool shared = reply && !reply->shared.empty();
                       if (reply && shared) {
                         if (auto got = call.take_reply(reply->shared)) {
                           reply->data = std::move(got->values);  // borrowed from the slot until it is settled
                           reply->shared = {};
                         } else {
                           r = fault{errc::malformed, "a collective's answer: " + got.error().message};
                         }
                       }
                       if (auto* ok = std::get_if<kv_collective_reply>(&r))
                         stats->add(shared, ok->data.empty() ? 0 : ok->data.nbytes());
                       const bool late = timed_out(r);
                       done(std::move(r));  // copies the answer out of the slot
                       settle_reply(call, !shared, late);
                     },
                     static_cast<std::size_t>(std::max<std::int64_t>(answer_numel, 0)) * sizeof(float),
                     over_the_network(shard)});
  }

  or_fault<tensor> ring(ring_request r) override {
    auto p = std::make_shared<std::promise<or_fault<tensor>>>();
    auto f = p->get_future();
    const std::string what = "collective \"" + r.name + "\"";
    const auto wait = r.timeout + std::chrono::seconds(1);  // the member's own deadline comes first
    caf::anon_send(member_, member_call_ring{static_cast<ring_kind>(r.kind), std::move(r.name), r.op, r.root,
                                             std::move(r.values), {}, std::move(r.counts), r.timeout,
                                             [p](or_fault<tensor> x) { p->set_value(std::move(x)); }});
    return await(f, wait, what);
  }

  void close() override {
    if (closed_ || !member_) return;
    closed_ = true;
    auto p = std::make_shared<std::promise<void>>();
    auto f = p->get_future();
    caf::anon_send(member_, member_call_close{[p] { p->set_value(); }});
    f.wait_for(std::chrono::seconds(10));
    // The caller may free its arrays once this returns: Note [Borrowed pushes].
    if (!borrows_->wait_all_returned(std::chrono::seconds(10)))
      spdlog::error("troupe.kv: closing with pushes that CAF has not sent after 10 s");
  }

 private:
  std::chrono::milliseconds request_timeout() const {
    return std::chrono::milliseconds(place_.job.request_timeout_ms) + std::chrono::seconds(1);
  }

  template <class T, class Call, class Msg>
  or_fault<T> blocking(Msg msg, const std::string& what) {
    auto p = std::make_shared<std::promise<or_fault<T>>>();
    auto f = p->get_future();
    caf::anon_send(member_, Call{std::move(msg), [p](or_fault<T> r) { p->set_value(std::move(r)); }});
    return await(f, request_timeout(), what);
  }

  template <class Call, class Msg>
  std::optional<fault> blocking_ok(Msg msg, std::chrono::milliseconds timeout, const std::string& what) {
    auto p = std::make_shared<std::promise<or_fault<bool>>>();
    auto f = p->get_future();
    caf::anon_send(member_, Call{std::move(msg), [p](std::optional<fault> e) {
                                   p->set_value(e ? or_fault<bool>(*e) : or_fault<bool>(true));
                                 }});
    auto r = await(f, timeout, what);
    if (auto* e = std::get_if<fault>(&r)) return *e;
    return std::nullopt;
  }

  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> owned_;
  caf::actor_system& sys_;
  caf::actor member_;
  std::function<or_fault<std::pair<std::string, std::uint16_t>>(const caf::actor&)> publish_;
  member_assignment place_;
  std::chrono::milliseconds connect_timeout_{30000};
  bool closed_ = false;
  heap_returner heap_;
  std::string fast_path_tag_;
  // Its links to the shards (transport/shard_links.hpp), wired at the join: through the
  // same-host fast path's slots, or over the network when the fast path is off.
  std::shared_ptr<shard_links> links_ = std::make_shared<shard_links>();
  std::shared_ptr<transfer_counters> stats_ = std::make_shared<transfer_counters>();
  std::shared_ptr<borrow_ledger> borrows_ = std::make_shared<borrow_ledger>();  // Note [Borrowed pushes]
  std::optional<push_compressor> compressor_;  // with the job's --compression (Note [Compressed key-value pushes])
  std::shared_ptr<pulled_views> views_;        // --pull-precision 2bit (Note [2-bit key-value pulls])
  std::shared_ptr<shard_restores> restores_ = std::make_shared<shard_restores>();  // Note [A shard away]
};

}  // namespace

or_fault<std::unique_ptr<kv_transport>> join_in_process(caf::actor_system& sys, member_options opts,
                                                        const std::string& job_id, const std::string& fast_path_tag) {
  auto t = std::make_unique<remote_transport>(nullptr, nullptr, sys, std::move(opts), fast_path_tag);
  if (auto e = t->join(job_id, {})) return *e;
  return std::unique_ptr<kv_transport>(std::move(t));
}

or_fault<std::unique_ptr<kv_transport>> join_owning(std::unique_ptr<caf::actor_system_config> cfg,
                                                    std::unique_ptr<caf::actor_system> sys, member_options opts,
                                                    const std::string& fast_path_tag, const std::string& job_id,
                                                    const std::string& proof) {
  caf::actor_system& ref = *sys;
  auto t = std::make_unique<remote_transport>(std::move(cfg), std::move(sys), ref, std::move(opts), fast_path_tag);
  if (auto e = t->join(job_id, proof)) return *e;
  return std::unique_ptr<kv_transport>(std::move(t));
}

}  // namespace troupe::kv
