// kv_fast_path: a key-value member's pools of channels, against a real shard end
// (shm::worker_channels) in this process: small calls stay in the message; a pull creates
// a channel and its answer confirms it; pushes wait for that; calls in flight get channels
// of their own up to the cap; a shard that answers in the message is offered no more
// slots; a timeout closes a channel for good; an answer naming a slot not lent is refused.
#define BOOST_TEST_MODULE kv_fast_path
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "client/kv_fast_path.hpp"
#include "tests/support/shm_tag.hpp"

using namespace troupe;
using kv::kv_fast_path;

namespace {

constexpr std::uint32_t rank = 2;
constexpr std::int64_t n = 5000;  // above kv_fast_path::min_numel

struct pool_and_shard {
  std::string tag = test::fresh_shm_tag();
  kv_fast_path pool{tag, rank, 2};
  shm::worker_channels shard{tag};

  // The shard answers a pull in the slot offered, with `value` (n floats).
  shared_tensor answer(const shared_tensor& reply_to, float value) {
    std::string refused;
    auto where = shard.answer_with(
        rank, reply_to, {n},
        [&](tensor_view out) {
          for (std::int64_t i = 0; i < n; ++i) out.data<float>()[i] = value + static_cast<float>(i);
        },
        refused);
    BOOST_REQUIRE_MESSAGE(where.has_value(), refused);
    return *where;
  }
  // One pull of shard s answered in its slot; returns the channel used.
  std::size_t confirm(std::uint32_t s) {
    auto lease = pool.lend_reply(s, n);
    BOOST_REQUIRE(lease.has_value());
    auto got = pool.take_reply(s, lease->channel, answer(lease->where, 1.f));
    BOOST_REQUIRE_MESSAGE(got.has_value(), (got ? std::string() : got.error().message));
    BOOST_TEST(got->data<float>()[n - 1] == 1.f + static_cast<float>(n - 1));
    pool.reply_settled(s, lease->channel, false, false);
    return lease->channel;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(small_calls_stay_in_the_message) {
  pool_and_shard p;
  BOOST_TEST(!p.pool.lend_reply(0, kv_fast_path::min_numel - 1).has_value());
  BOOST_TEST(!p.pool.lend_push(0, kv_fast_path::min_numel - 1).has_value());
  BOOST_TEST(!p.pool.lend_reply(7, n).has_value());  // no such shard
}

BOOST_AUTO_TEST_CASE(pushes_wait_for_a_confirmed_channel_and_cross_bit_exact) {
  pool_and_shard p;
  BOOST_TEST(!p.pool.lend_push(0, n).has_value());  // no channel yet
  auto lease = p.pool.lend_reply(0, n);
  BOOST_REQUIRE(lease.has_value());
  BOOST_TEST(!p.pool.lend_push(0, n).has_value());  // created, not confirmed
  BOOST_TEST(p.pool.confirmed(0) == 0u);
  auto got = p.pool.take_reply(0, lease->channel, p.answer(lease->where, 3.f));
  BOOST_REQUIRE(got.has_value());
  p.pool.reply_settled(0, lease->channel, false, false);
  BOOST_TEST(p.pool.confirmed(0) == 1u);
  BOOST_TEST(p.pool.confirmed(1) == 0u);  // per shard

  auto push = p.pool.lend_push(0, n);
  BOOST_REQUIRE(push.has_value());
  for (std::int64_t i = 0; i < n; ++i) push->buffer.data<float>()[i] = -0.5f * static_cast<float>(i);
  const shared_tensor where = p.pool.seal_push(0, *push);
  BOOST_REQUIRE(!where.empty());
  BOOST_TEST(!p.pool.lend_push(0, n).has_value());  // the only confirmed push slot is lent
  auto seen = p.shard.take_push(rank, where);
  BOOST_REQUIRE_MESSAGE(seen.has_value(), (seen ? std::string() : seen.error().message));
  BOOST_TEST(std::memcmp(seen->bytes(), push->buffer.bytes(), n * 4) == 0);
  p.pool.push_settled(0, push->channel, false);
  BOOST_TEST(p.pool.lend_push(0, n).has_value());  // free again
}

BOOST_AUTO_TEST_CASE(calls_in_flight_get_channels_of_their_own_up_to_the_cap) {
  pool_and_shard p;
  std::vector<kv_fast_path::reply_lease> out;
  for (std::size_t i = 0; i < kv_fast_path::max_channels; ++i) {
    auto lease = p.pool.lend_reply(1, n);
    BOOST_REQUIRE(lease.has_value());
    BOOST_TEST(lease->channel == i);
    out.push_back(*lease);
  }
  BOOST_TEST(!p.pool.lend_reply(1, n).has_value());  // at the cap: in the message
  // The shard maps them all (under its own cap per member) and answers each in its slot.
  for (auto& l : out) {
    auto got = p.pool.take_reply(1, l.channel, p.answer(l.where, 0.f));
    BOOST_REQUIRE(got.has_value());
    p.pool.reply_settled(1, l.channel, false, false);
  }
  BOOST_TEST(p.pool.confirmed(1) == kv_fast_path::max_channels);
  BOOST_TEST(p.shard.mapped() == kv_fast_path::max_channels);
  // A call larger than every channel's slot gets none: the pool is full.
  BOOST_TEST(!p.pool.lend_reply(1, static_cast<std::int64_t>(kv_fast_path::min_slot_bytes)).has_value());
}

BOOST_AUTO_TEST_CASE(a_larger_call_gets_a_larger_channel) {
  pool_and_shard p;
  p.confirm(0);
  const std::int64_t big = static_cast<std::int64_t>(kv_fast_path::min_slot_bytes);  // 4 MiB of floats
  BOOST_TEST(!p.pool.lend_push(0, big).has_value());  // the confirmed channel is too small
  auto lease = p.pool.lend_reply(0, big);
  BOOST_REQUIRE(lease.has_value());
  BOOST_TEST(lease->channel == 1u);
  BOOST_TEST(lease->where.capacity >= static_cast<std::uint64_t>(big) * 4);
  p.pool.reply_settled(0, lease->channel, false, false);
}

BOOST_AUTO_TEST_CASE(a_shard_that_answers_in_the_message_is_offered_no_more_slots) {
  pool_and_shard p;
  auto lease = p.pool.lend_reply(0, n);
  BOOST_REQUIRE(lease.has_value());
  p.pool.reply_settled(0, lease->channel, true, false);  // answered in the message
  BOOST_TEST(!p.pool.lend_reply(0, n).has_value());
  BOOST_TEST(!p.pool.lend_push(0, n).has_value());
  BOOST_TEST(p.pool.lend_reply(1, n).has_value());  // another shard may still map them
}

BOOST_AUTO_TEST_CASE(a_timeout_closes_the_channel_for_good) {
  pool_and_shard p;
  const std::size_t c = p.confirm(0);
  auto push = p.pool.lend_push(0, n);
  BOOST_REQUIRE(push.has_value());
  BOOST_REQUIRE(!p.pool.seal_push(0, *push).empty());
  p.pool.push_settled(0, push->channel, true);  // timed out: the shard may still read it
  BOOST_TEST(p.pool.confirmed(0) == 0u);
  BOOST_TEST(!p.pool.lend_push(0, n).has_value());
  auto next = p.pool.lend_reply(0, n);  // a fresh channel, never the closed one
  BOOST_REQUIRE(next.has_value());
  BOOST_TEST(next->channel != c);
}

BOOST_AUTO_TEST_CASE(an_answer_naming_a_slot_not_lent_is_refused) {
  pool_and_shard p;
  const std::size_t c = p.confirm(0);
  auto lease = p.pool.lend_reply(0, n);
  BOOST_REQUIRE(lease.has_value());
  shared_tensor forged = p.answer(lease->where, 2.f);
  forged.ticket += 1;  // a stale or forged ticket
  BOOST_TEST(!p.pool.take_reply(0, lease->channel, forged).has_value());
  p.pool.reply_settled(0, lease->channel, false, false);
  BOOST_TEST(!p.pool.take_reply(0, c, p.answer(lease->where, 2.f)).has_value());  // no pull holds it now
}
