// Tests for actors/shard_bells.cpp (Note [Doorbells] in transport/doorbell.hpp), with a real
// scheduler and the shard's waiter thread: once a shard has answered a member's pull in
// its channel's reply slot it listens at the channel's bell block; a push and a pull posted
// there are served in order, as that member, and answered there (the pull's parameters in
// the reply slot, the same as the shard's own); a call in another member's name, a record
// that does not decode and one of no known kind are refused without touching the
// parameters, the first counted as a refusal for the job's safety and the others as the
// shard's malformed messages; counts a broken member left make the shard stop reading the
// block (counted as malformed once); a member
// that leaves is no longer watched. The members are scoped actors that speak the protocol
// and write the records by hand, as actors/stage_bells.cpp does.
#define BOOST_TEST_MODULE shard_bells
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <thread>

#include "actors/bell_records.hpp"
#include "actors/lone_shard.hpp"
#include "actors/runtime.hpp"
#include "actors/shard_server.hpp"
#include "monitoring/metrics.hpp"
#include "monitoring/observability.hpp"
#include "monitoring/refusals.hpp"
#include "tests/support/numeric.hpp"
#include "tests/support/shm_tag.hpp"
#include "tests/support/tiny_job.hpp"
#include "transport/shared_slots.hpp"
#include "transport/word_waiter.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

constexpr std::int64_t n = 15;
constexpr auto timeout = std::chrono::seconds(5);

tensor filled(float v) { return test::filled(n, v); }

// Worker's pull of step `clock` from shard 0, offering `reply_to`.
kv_pull pull_of(std::uint32_t worker, std::int64_t clock, shared_tensor reply_to) {
  kv_pull r = step_pull(0, worker, 0, clock);
  r.reply_to = std::move(reply_to);
  return r;
}

// One shard with the fast path on, two members joined (async SGD at lr 1, no correction,
// so a push of g moves every parameter by -g), and member 0's channel confirmed by a pull
// answered in its reply slot.
struct bell_job {
  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  std::string tag = test::fresh_shm_tag();
  observability obs{std::make_shared<monitoring::registry>("job-under-test"), nullptr};
  lone_coordinator_actor coordinator;
  local_shard_actor shard_server;
  shard_actor shard;
  std::optional<caf::scoped_actor> members[2];
  int rank0 = 0;  // which of them holds rank 0
  shm::shard_channel channel;
  std::uint64_t next_id = 1;

  bell_job() {
    configure_in_process(cfg);
    sys.emplace(cfg);
    job_spec job = test::tiny_job(sync_mode::async, 2, 1);
    job.train.lr = 1.f;
    job.train.warmup_epochs = 0.f;
    job.train.schedule = lr_schedule_kind::constant;
    job.train.optimizer = optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f};
    job.async_correction = async_rule::none;
    job.request_timeout_ms = 5000;
    coordinator = spawn_lone_coordinator(*sys, job, n);
    shard_server = spawn_shard_server(*sys, coordinator, "job-under-test", timeout, obs, tag);
    join_as_shard(shard_server, "", 0);
    // The shard joins on its own thread; a member that asks first is refused and asks
    // again. Both ask at once, since the coordinator welcomes them once both have joined.
    std::string join_why[2];
    std::uint32_t rank_of[2] = {9, 9};
    auto join = [&](int k) {
      for (int attempt = 0; attempt < 500 && rank_of[k] == 9; ++attempt) {
        (*members[k])
            ->request(coordinator, timeout, join_atom::value, worker_join{"job-under-test", {}, 0, {}, {}, -1})
            .receive(
                [&](worker_welcome& w) {
                  shard = w.shards.at(0);
                  rank_of[k] = w.place.rank;
                },
                [&](caf::error& e) { join_why[k] = describe(e); });
        if (rank_of[k] == 9) std::this_thread::sleep_for(10ms);
      }
    };
    members[0].emplace(*sys);
    members[1].emplace(*sys);
    std::thread other([&] { join(1); });
    join(0);
    other.join();
    BOOST_REQUIRE_MESSAGE(rank_of[0] != 9 && rank_of[1] != 9, "a member did not join: " << join_why[0] << join_why[1]);
    rank0 = rank_of[0] == 0 ? 0 : 1;
    auto c = shm::shard_channel::create(tag, shm::slot_bytes_for(n), 0);
    BOOST_REQUIRE(c.has_value());
    channel = std::move(*c);
    // The first pull, as a message, offers the reply slot; its answer confirms the channel.
    auto where = channel.lend_reply_slot();
    BOOST_REQUIRE(where.has_value());
    kv_pull r = pull_of(0, 0, *where);
    std::optional<kv_pull_reply> first;
    std::string why;
    (*members[rank0])
        ->request(shard, timeout, pull_atom::value, r)
        .receive([&](kv_pull_reply& p) { first = std::move(p); }, [&](caf::error& e) { why = describe(e); });
    BOOST_REQUIRE_MESSAGE(first.has_value(), "the first pull failed: " << why);
    BOOST_REQUIRE(channel.take_reply(first->shared).has_value());
  }
  ~bell_job() {
    members[0].reset();
    members[1].reset();
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(shard_server, caf::exit_reason::user_shutdown);
  }

  shm::bell_block bell() { return *channel.bell(); }

  template <class Msg>
  std::uint64_t post(bells::kind k, const Msg& m) {
    const std::uint64_t id = next_id++;
    auto rec = bells::record(*sys, k, id, m);
    BOOST_REQUIRE(rec.has_value());
    BOOST_REQUIRE(bell().requests().post(*rec));
    bell().requests().ring();
    return id;
  }
  // A push of `value`s from the push slot in `worker`'s name, at base version `version`.
  std::uint64_t post_push(std::uint32_t worker, float value, std::int64_t version) {
    auto put = channel.put_push(filled(value));
    BOOST_REQUIRE(put.has_value());
    kv_push g = step_push(0, worker, 0, 0, version, tensor());
    g.shared = *put;
    return post(bells::kind::push, g);
  }
  void post_raw(const std::vector<std::byte>& rec) {
    BOOST_REQUIRE(bell().requests().post(rec));
    bell().requests().ring();
  }
  // The next answer in the bell block, waiting up to `limit`.
  std::optional<std::vector<std::byte>> answer(std::chrono::milliseconds limit = 5000ms) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      bool corrupt = false;
      if (auto rec = bell().answers().take(corrupt)) return rec;
      BOOST_REQUIRE(!corrupt);
      if (std::chrono::steady_clock::now() > until) return std::nullopt;
      std::this_thread::sleep_for(1ms);
    }
  }
  // The error an answer carries.
  caf::error error_of(const std::vector<std::byte>& rec, std::uint64_t id) {
    auto h = bells::head_of(rec);
    BOOST_REQUIRE(h.has_value());
    BOOST_TEST(h->id == id);
    BOOST_REQUIRE((h->kind == bells::kind::error));
    caf::error e;
    BOOST_REQUIRE(bells::body_of(*sys, rec, e));
    return e;
  }
  // Broken records the shard counted (troupe_rejected_messages_total{reason="malformed"}).
  double malformed() { return obs.metrics->shard(0).rejected("malformed")->Value(); }
  params_reply snapshot() {
    params_reply out;
    caf::scoped_actor self{*sys};
    std::string why = "none came";
    bool got = false;
    self->request(coordinator, timeout, lone_snapshot{})
        .receive(
            [&](params_reply& p) {
              out = std::move(p);
              got = true;
            },
            [&](caf::error& e) { why = describe(e); });
    BOOST_REQUIRE_MESSAGE(got, "no snapshot: " << why);
    return out;
  }
};

bool same_values(const tensor& a, const tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_push_and_a_pull_through_the_bell_are_served_in_order_and_answered_there) {
  BOOST_REQUIRE_MESSAGE(word_waiter::supported(), "this kernel lacks futex_waitv");
  bell_job job;
  BOOST_TEST(job.bell().listening());
  const params_reply before = job.snapshot();
  // A push of 2s from the push slot, then a pull offering the reply slot, posted together.
  const auto push_id = job.post_push(0, 2.f, before.version);
  auto where = job.channel.lend_reply_slot();
  BOOST_REQUIRE(where.has_value());
  const auto pull_id = job.post(bells::kind::pull, pull_of(0, 1, *where));

  auto first = job.answer();
  BOOST_REQUIRE(first.has_value());
  auto h = bells::head_of(*first);
  BOOST_REQUIRE(h.has_value());
  BOOST_TEST(h->id == push_id);
  BOOST_REQUIRE((h->kind == bells::kind::ack));
  kv_push_ack ack;
  BOOST_REQUIRE(bells::body_of(*job.sys, *first, ack));
  BOOST_REQUIRE(ack.versions.size() == 1u);
  BOOST_TEST(ack.versions[0] == before.version + 1);
  job.channel.push_settled(false);

  auto second = job.answer();
  BOOST_REQUIRE(second.has_value());
  h = bells::head_of(*second);
  BOOST_REQUIRE(h.has_value());
  BOOST_TEST(h->id == pull_id);
  BOOST_REQUIRE((h->kind == bells::kind::params));
  kv_pull_reply p;
  BOOST_REQUIRE(bells::body_of(*job.sys, *second, p));
  BOOST_TEST(p.versions == std::vector<std::int64_t>{before.version + 1});  // the push before it was applied first
  BOOST_REQUIRE(!p.shared.empty());             // the values lie in the reply slot
  auto values = job.channel.take_reply(p.shared);
  BOOST_REQUIRE(values.has_value());
  const params_reply after = job.snapshot();
  BOOST_TEST(same_values(*values, after.params));
  for (std::int64_t i = 0; i < n; ++i)
    BOOST_TEST(after.params.data<float>()[i] == before.params.data<float>()[i] - 2.f);
}

BOOST_AUTO_TEST_CASE(calls_in_another_members_name_or_that_do_not_decode_are_refused_and_change_nothing) {
  bell_job job;
  const params_reply before = job.snapshot();
  const auto impostors_before = monitoring::refusals(monitoring::refusal::not_a_member);
  // Member 0's segment, worker 1's name.
  const auto id = job.post_push(1, 5.f, before.version);
  auto a = job.answer();
  BOOST_REQUIRE(a.has_value());
  BOOST_TEST((troupe_code(job.error_of(*a, id)) == errc::not_member));
  job.channel.push_settled(false);
  const auto pull_id = job.post(bells::kind::pull, pull_of(1, 0, {}));
  a = job.answer();
  BOOST_REQUIRE(a.has_value());
  BOOST_TEST((troupe_code(job.error_of(*a, pull_id)) == errc::not_member));
  // Calls in another member's name are refusals for the job's safety, not broken bytes.
  BOOST_TEST(monitoring::refusals(monitoring::refusal::not_a_member) == impostors_before + 2);
  BOOST_TEST(job.malformed() == 0.0);

  // A push whose bytes do not decode.
  std::vector<std::byte> junk(bells::head_bytes + 7, std::byte{0x5a});
  junk[0] = static_cast<std::byte>(bells::kind::push);
  const std::uint64_t junk_id = 77;
  std::memcpy(junk.data() + 1, &junk_id, sizeof junk_id);
  job.post_raw(junk);
  a = job.answer();
  BOOST_REQUIRE(a.has_value());
  BOOST_TEST((troupe_code(job.error_of(*a, junk_id)) == errc::malformed));
  // A record of no kind, and an answer where a call belongs, get no answer at all.
  std::vector<std::byte> nothing(bells::head_bytes, std::byte{0});
  job.post_raw(nothing);
  auto ack_rec = bells::record(*job.sys, bells::kind::ack, 9, kv_push_ack{});
  job.post_raw(*ack_rec);
  BOOST_TEST(!job.answer(300ms).has_value());
  // The three broken records are the shard's rejected messages, and none an impostor's.
  BOOST_TEST(job.malformed() == 3.0);
  BOOST_TEST(monitoring::refusals(monitoring::refusal::not_a_member) == impostors_before + 2);
  const params_reply after = job.snapshot();
  BOOST_TEST(after.version == before.version);
  BOOST_TEST(same_values(after.params, before.params));
}

BOOST_AUTO_TEST_CASE(corrupt_counts_make_the_shard_stop_reading_the_block) {
  bell_job job;
  const params_reply before = job.snapshot();
  *job.bell().requests().posted_word() += 1000;  // more than a full ring
  job.bell().requests().ring();
  std::this_thread::sleep_for(100ms);
  // A well-formed pull after it gets no answer: the block is no longer read.
  auto where = job.channel.lend_reply_slot();
  BOOST_REQUIRE(where.has_value());
  auto rec = bells::record(*job.sys, bells::kind::pull, 1, pull_of(0, 1, *where));
  *job.bell().requests().posted_word() -= 1000;
  BOOST_REQUIRE(job.bell().requests().post(*rec));
  job.bell().requests().ring();
  BOOST_TEST(!job.answer(300ms).has_value());
  BOOST_TEST(job.snapshot().version == before.version);
  BOOST_TEST(job.malformed() == 1.0);  // the corrupt counts, once: the block is no longer read
}

BOOST_AUTO_TEST_CASE(a_member_that_left_is_no_longer_watched) {
  bell_job job;
  caf::anon_send(job.coordinator, lone_leave{0});
  std::this_thread::sleep_for(100ms);
  auto where = job.channel.lend_reply_slot();
  BOOST_REQUIRE(where.has_value());
  job.post(bells::kind::pull, pull_of(0, 1, *where));
  BOOST_TEST(!job.answer(300ms).has_value());
}
