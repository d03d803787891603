// Tests for actors/member_bells (Note [Doorbells] in transport/doorbell.hpp), alone: bell
// blocks in plain memory stand for channels' segments, and the test writes the shards'
// answers by hand. A call goes through a block only once its shard listens there; its
// record is the call as sent; each answer reaches its own call's handler, from any of a
// shard's blocks (a member with several channels per shard); an answer to no call, one
// that does not decode, and corrupt counts are handled without touching other calls;
// the deadline and close fail a shard's calls and send its later calls as messages,
// leaving other shards' doorbells alone; forget_all lets later calls ring again; and a
// member waiting on its own thread takes what is posted, unless mail waits for it.
#define BOOST_TEST_MODULE member_bells
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <cstring>

#include "actors/bell_records.hpp"
#include "actors/member_bells.hpp"
#include "actors/runtime.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// A channel's bell block in plain memory, zeroed (no record posted either way).
struct fake_block {
  std::byte* mem = static_cast<std::byte*>(std::aligned_alloc(64, shm::bell_block::bytes()));
  fake_block(bool listening = true) {
    std::memset(mem, 0, shm::bell_block::bytes());
    if (listening) shm::bell_block(mem).set_listening();
  }
  ~fake_block() { std::free(mem); }
  fake_block(const fake_block&) = delete;
  shm::bell_block bell() const { return shm::bell_block(mem); }
};

struct fixture {
  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  std::atomic<int> nudges{0};
  std::vector<std::chrono::milliseconds> deadlines;  // asked for, in order
  std::optional<member_bells> bells;

  explicit fixture(std::chrono::milliseconds timeout = 5000ms) {
    add_protocol_types(cfg);
    sys.emplace(cfg);
    member_bells::shell sh;
    sh.sys = &*sys;
    sh.who = "member under test";
    sh.make_waiter = [this](std::shared_ptr<std::atomic<bool>> due) {
      return std::make_unique<word_waiter>([this, due] {
        if (!due->exchange(true)) ++nudges;
      });
    };
    sh.send_deadline = [this](std::chrono::milliseconds after) { deadlines.push_back(after); };
    bells.emplace(std::move(sh), timeout);
  }
  ~fixture() { bells.reset(); }

  // The next request record the member posted in `b`.
  std::vector<std::byte> request(const fake_block& b) {
    bool corrupt = false;
    auto rec = b.bell().requests().take(corrupt);
    BOOST_REQUIRE(!corrupt);
    BOOST_REQUIRE(rec.has_value());
    return *rec;
  }
  template <class T>
  void answer(const fake_block& b, bells::kind k, std::uint64_t id, T x) {
    auto rec = bells::record(*sys, k, id, std::move(x));
    BOOST_REQUIRE(rec.has_value());
    BOOST_REQUIRE(b.bell().answers().post(*rec));
    b.bell().answers().ring();
  }
};

kv_pull pull_from(std::uint32_t worker, std::int64_t clock) {
  kv_pull r;
  r.worker = worker;
  r.clock = clock;
  r.parts = {kv_part_id{31}};
  r.rows = {{}};
  r.row_numel = {0};
  return r;
}

kv_pull_reply reply(std::uint32_t shard, std::int64_t version) {
  kv_pull_reply r;
  r.shard = shard;
  r.versions = {version};
  return r;
}

kv_push_ack ack(std::int64_t version) {
  kv_push_ack a;
  a.versions = {version};
  return a;
}

// A call's handlers that record what became of it.
struct outcome {
  std::optional<kv_pull_reply> params;
  std::optional<kv_push_ack> ack;
  std::optional<caf::error> error;
  member_bells::call pull() {
    return {[this](kv_pull_reply& p) { params = p; }, nullptr, [this](caf::error& e) { error = e; }};
  }
  member_bells::call push() {
    return {nullptr, [this](kv_push_ack& a) { ack = a; }, [this](caf::error& e) { error = e; }};
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_pull_goes_through_a_listening_block_and_its_answer_reaches_its_handler) {
  if (!word_waiter::supported()) return;  // this kernel has no futex_waitv: every call goes as a message
  fixture f;
  fake_block quiet(false), b;
  outcome o;
  BOOST_TEST(!f.bells->post_pull(0, quiet.bell(), pull_from(2, 7), o.pull()));  // the shard does not listen there
  BOOST_TEST(!f.bells->post_pull(0, std::nullopt, pull_from(2, 7), o.pull()));
  BOOST_TEST(!f.bells->in_flight());
  BOOST_REQUIRE(f.bells->post_pull(0, b.bell(), pull_from(2, 7), o.pull()));
  BOOST_TEST(f.bells->in_flight());
  BOOST_TEST(f.deadlines.size() == 1u);
  const auto rec = f.request(b);
  const auto h = bells::head_of(rec);
  BOOST_REQUIRE(h.has_value());
  BOOST_TEST(static_cast<int>(h->kind) == static_cast<int>(bells::kind::pull));
  kv_pull sent;
  BOOST_REQUIRE(bells::body_of(*f.sys, rec, sent));
  BOOST_TEST(sent.worker == 2u);
  BOOST_TEST(sent.clock == 7);
  f.answer(b, bells::kind::params, h->id, reply(0, 41));
  f.bells->on_answered();
  BOOST_REQUIRE(o.params.has_value());
  BOOST_TEST(o.params->versions == std::vector<std::int64_t>{41});
  BOOST_TEST(!o.error.has_value());
  BOOST_TEST(!f.bells->in_flight());
  BOOST_TEST(f.bells->taken().answers == 1u);
  f.bells->on_answered();  // a nudge that finds nothing is counted
  BOOST_TEST(f.bells->taken().empty_nudges == 1u);
}

BOOST_AUTO_TEST_CASE(answers_from_two_blocks_of_one_shard_reach_their_own_calls) {
  if (!word_waiter::supported()) return;
  fixture f;
  fake_block b1, b2;
  outcome pull, push;
  BOOST_REQUIRE(f.bells->post_pull(1, b1.bell(), pull_from(0, 1), pull.pull()));
  kv_push g;
  g.worker = 0;
  BOOST_REQUIRE(f.bells->post_push(1, b2.bell(), g, push.push()));
  f.bells->ring();
  const auto pull_id = bells::head_of(f.request(b1))->id;
  const auto push_id = bells::head_of(f.request(b2))->id;
  BOOST_TEST(pull_id != push_id);
  f.answer(b2, bells::kind::ack, push_id, ack(5));
  f.answer(b1, bells::kind::params, pull_id, reply(1, 6));
  f.bells->on_answered();
  BOOST_REQUIRE(push.ack.has_value());
  BOOST_TEST(push.ack->versions == std::vector<std::int64_t>{5});
  BOOST_REQUIRE(pull.params.has_value());
  BOOST_TEST(pull.params->versions == std::vector<std::int64_t>{6});
  // A block already watched for shard 1 is not another shard's.
  outcome other;
  BOOST_TEST(!f.bells->post_pull(2, b1.bell(), pull_from(0, 2), other.pull()));
}

BOOST_AUTO_TEST_CASE(an_answer_to_no_call_is_dropped_and_one_that_does_not_decode_fails_its_call) {
  if (!word_waiter::supported()) return;
  fixture f;
  fake_block b;
  outcome o, p;
  BOOST_REQUIRE(f.bells->post_pull(0, b.bell(), pull_from(0, 1), o.pull()));
  BOOST_REQUIRE(f.bells->post_pull(0, b.bell(), pull_from(0, 2), p.pull()));
  const auto first = bells::head_of(f.request(b))->id;
  const auto second = bells::head_of(f.request(b))->id;
  f.answer(b, bells::kind::params, 999, reply(0, 1));  // no such call
  f.answer(b, bells::kind::ack, first, ack(1));        // a push's answer to a pull
  f.answer(b, bells::kind::error, second, make_error(fault{errc::bad_shape, "wrong rows"}));
  f.bells->on_answered();
  BOOST_TEST(!o.params.has_value());
  BOOST_REQUIRE(o.error.has_value());
  BOOST_TEST(describe(*o.error).find("does not decode") != std::string::npos, describe(*o.error));
  BOOST_REQUIRE(p.error.has_value());
  BOOST_TEST((troupe_code(*p.error) == errc::bad_shape));
  BOOST_TEST(!f.bells->in_flight());
}

BOOST_AUTO_TEST_CASE(the_deadline_closes_a_late_shards_doorbells_and_its_later_calls_go_as_messages) {
  if (!word_waiter::supported()) return;
  fixture f(0ms);  // every call is late at once
  fake_block late, other;
  outcome o;
  BOOST_REQUIRE(f.bells->post_pull(0, late.bell(), pull_from(0, 1), o.pull()));
  f.bells->on_deadline();
  BOOST_REQUIRE(o.error.has_value());
  BOOST_TEST((*o.error == caf::sec::request_timeout));
  BOOST_TEST(describe(*o.error).find("the doorbell to shard 0 closed") != std::string::npos, describe(*o.error));
  outcome again, elsewhere;
  BOOST_TEST(!f.bells->post_pull(0, late.bell(), pull_from(0, 2), again.pull()));
  BOOST_TEST(f.bells->post_pull(1, other.bell(), pull_from(0, 2), elsewhere.pull()));
  BOOST_TEST(!elsewhere.error.has_value());
}

BOOST_AUTO_TEST_CASE(corrupt_answer_counts_close_that_shards_doorbells) {
  if (!word_waiter::supported()) return;
  fixture f;
  fake_block b;
  outcome o;
  BOOST_REQUIRE(f.bells->post_pull(3, b.bell(), pull_from(0, 1), o.pull()));
  *b.bell().answers().posted_word() = 1000;  // more than a full ring
  f.bells->on_answered();
  BOOST_REQUIRE(o.error.has_value());
  BOOST_TEST(describe(*o.error).find("corrupt") != std::string::npos, describe(*o.error));
  outcome later;
  BOOST_TEST(!f.bells->post_pull(3, b.bell(), pull_from(0, 2), later.pull()));
}

BOOST_AUTO_TEST_CASE(forget_all_fails_the_calls_in_flight_and_later_calls_ring_again) {
  if (!word_waiter::supported()) return;
  fixture f;
  fake_block b, fresh;
  outcome o;
  BOOST_REQUIRE(f.bells->post_pull(0, b.bell(), pull_from(0, 1), o.pull()));
  f.bells->forget_all("the job wired new channels");
  BOOST_REQUIRE(o.error.has_value());
  BOOST_TEST(describe(*o.error).find("new channels") != std::string::npos, describe(*o.error));
  outcome again;
  BOOST_TEST(f.bells->post_pull(0, fresh.bell(), pull_from(0, 2), again.pull()));
}

BOOST_AUTO_TEST_CASE(a_waiting_member_takes_what_is_posted_and_one_with_mail_leaves_it_to_a_nudge) {
  if (!word_waiter::supported()) return;
  fixture f;
  fake_block b;
  outcome first, second;
  int nudged = 0;
  BOOST_REQUIRE(f.bells->post_pull(0, b.bell(), pull_from(0, 1), first.pull()));
  f.answer(b, bells::kind::params, bells::head_of(f.request(b))->id, reply(0, 9));
  f.bells->await([] { return true; }, [&] { ++nudged; });  // idle: it takes the answer itself
  BOOST_REQUIRE(first.params.has_value());
  BOOST_TEST(f.bells->taken().answers_awaited == 1u);
  BOOST_TEST(nudged == 0);
  BOOST_REQUIRE(f.bells->post_pull(0, b.bell(), pull_from(0, 2), second.pull()));
  f.answer(b, bells::kind::params, bells::head_of(f.request(b))->id, reply(0, 10));
  f.bells->await([] { return false; }, [&] { ++nudged; });  // mail waits: the answer is nudged for
  BOOST_TEST(!second.params.has_value());
  BOOST_TEST(nudged == 1);
  f.bells->on_answered();
  BOOST_REQUIRE(second.params.has_value());
  BOOST_TEST(f.bells->taken().answers == 2u);
}
