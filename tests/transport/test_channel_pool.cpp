// channel_pool: a member's channels to its shards, against a real shard end
// (shm::worker_channels) in this process, with a key-value member's limits (several
// channels per shard) and a training member's (one): small calls stay in the message; a
// pull creates a channel and its answer confirms it; pushes wait for that; calls in
// flight get channels of their own up to the cap; an encoded gradient is copied into a
// free slot; a shard that answers in the message, or one skipped, is offered no more
// slots; a timeout closes a channel for good; an answer naming a slot not lent is refused.
#define BOOST_TEST_MODULE channel_pool
#include <boost/test/unit_test.hpp>
#include <cstring>

#include "tests/support/shm_tag.hpp"
#include "transport/channel_pool.hpp"

using namespace troupe;
using shm::channel_pool;

namespace {

constexpr std::uint32_t rank = 2;
// A key-value member's limits: calls of 4,096 floats or more, 8 channels, 1 MiB slots at least.
constexpr channel_pool::limits many{4096, 8, std::size_t{1} << 20};
constexpr std::int64_t n = 5000;  // above many.min_numel

struct pool_and_shard {
  explicit pool_and_shard(channel_pool::limits l = many) : pool(tag, rank, 2, l) {}
  std::string tag = test::fresh_shm_tag();
  channel_pool pool;
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
    BOOST_TEST(got->values.data<float>()[n - 1] == 1.f + static_cast<float>(n - 1));
    pool.reply_settled(s, lease->channel, false, false);
    return lease->channel;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(small_calls_stay_in_the_message) {
  pool_and_shard p;
  BOOST_TEST(!p.pool.lend_reply(0, many.min_numel - 1).has_value());
  BOOST_TEST(!p.pool.lend_push(0, many.min_numel - 1).has_value());
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
  const shared_tensor where = p.pool.seal_push(0, push->channel, push->buffer);
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
  std::vector<channel_pool::reply_lease> out;
  for (std::size_t i = 0; i < many.max_channels; ++i) {
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
  BOOST_TEST(p.pool.confirmed(1) == many.max_channels);
  BOOST_TEST(p.shard.mapped() == many.max_channels);
  // A call larger than every channel's slot gets none: the pool is full.
  BOOST_TEST(!p.pool.lend_reply(1, static_cast<std::int64_t>(many.min_slot_bytes)).has_value());
}

BOOST_AUTO_TEST_CASE(a_larger_call_gets_a_larger_channel) {
  pool_and_shard p;
  p.confirm(0);
  const std::int64_t big = static_cast<std::int64_t>(many.min_slot_bytes);  // 4 MiB of floats
  BOOST_TEST(!p.pool.lend_push(0, big).has_value());                        // the confirmed channel is too small
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
  BOOST_REQUIRE(!p.pool.seal_push(0, push->channel, push->buffer).empty());
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

BOOST_AUTO_TEST_CASE(the_pool_says_what_the_log_should_hear) {
  pool_and_shard p;
  auto first = p.pool.lend_reply(0, n);
  BOOST_REQUIRE(first.has_value());
  auto got = p.pool.take_reply(0, first->channel, p.answer(first->where, 1.f));
  BOOST_REQUIRE(got.has_value());
  BOOST_TEST(got->first);  // the first answer in shared memory from shard 0
  BOOST_TEST((p.pool.reply_settled(0, first->channel, false, false) == channel_pool::settled::nothing));
  auto again = p.pool.lend_reply(0, n);
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(!p.pool.take_reply(0, again->channel, p.answer(again->where, 1.f))->first);
  BOOST_TEST((p.pool.reply_settled(0, again->channel, false, true) == channel_pool::settled::closed_by_timeout));
  auto other = p.pool.lend_reply(1, n);
  BOOST_REQUIRE(other.has_value());
  BOOST_TEST((p.pool.reply_settled(1, other->channel, true, false) == channel_pool::settled::declined));
  // A channel that cannot be made says why, and the shard is offered no more.
  channel_pool broken("not-a-job-tag", rank, 1, many);
  std::string problem;
  BOOST_TEST(!broken.lend_reply(0, n, &problem).has_value());
  BOOST_TEST(problem.find("job tag") != std::string::npos);
  problem.clear();
  BOOST_TEST(!broken.lend_reply(0, n, &problem).has_value());
  BOOST_TEST(problem.empty());  // declined: not tried again
}

BOOST_AUTO_TEST_CASE(a_training_member_keeps_one_exact_channel_per_shard) {
  pool_and_shard p(channel_pool::limits{1, 1, 0});
  auto lease = p.pool.lend_reply(0, 10);
  BOOST_REQUIRE(lease.has_value());
  BOOST_TEST(lease->where.capacity == 64u);              // sized for its slice (rounded to 64 bytes), no more
  BOOST_TEST(!p.pool.lend_reply(0, 10).has_value());     // its one reply slot is lent
  p.pool.reply_settled(0, lease->channel, false, true);  // a timeout: closed, and no second channel
  BOOST_TEST(!p.pool.lend_reply(0, 10).has_value());
  p.pool.skip(1);  // shard 1 shares the process: never a slot
  BOOST_TEST(!p.pool.lend_reply(1, 10).has_value());
}

BOOST_AUTO_TEST_CASE(an_encoded_gradient_is_copied_into_a_free_slot) {
  pool_and_shard p;
  BOOST_TEST(!p.pool.copy_push(0, tensor({n})).has_value());  // no confirmed channel yet
  const std::size_t c = p.confirm(0);
  tensor wire({n}, dtype::u8);  // e.g. a 2-bit gradient's bytes
  for (std::int64_t i = 0; i < n; ++i) wire.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 7);
  auto sealed = p.pool.copy_push(0, wire);
  BOOST_REQUIRE(sealed.has_value());
  BOOST_TEST(sealed->channel == c);
  BOOST_TEST(!p.pool.copy_push(0, wire).has_value());  // its slot is lent until the push is settled
  auto seen = p.shard.take_push(rank, sealed->where);
  BOOST_REQUIRE_MESSAGE(seen.has_value(), (seen ? std::string() : seen.error().message));
  BOOST_TEST((seen->type() == dtype::u8));
  BOOST_TEST(std::memcmp(seen->bytes(), wire.bytes(), static_cast<std::size_t>(n)) == 0);
  p.pool.push_settled(0, sealed->channel, false);
  BOOST_TEST(p.pool.copy_push(0, wire).has_value());
}
