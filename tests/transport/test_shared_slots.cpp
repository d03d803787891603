// shared_slots: a worker's channel and a shard's view of it carry tensors bit-exactly; the
// push slot waits for a reply through the channel; slots are lent one request at a time; a
// stale ticket, a slot outside the segment, a shape larger than its slot and another job's
// segment are refused; a timeout closes the channel; a member may keep several channels
// to one shard, which maps at most max_per_member of them and unmaps the least used.
#define BOOST_TEST_MODULE shared_slots
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <filesystem>
#include <string>

#include "tests/support/shm_tag.hpp"
#include "transport/shared_slots.hpp"

using namespace troupe;

namespace {

using test::fresh_shm_tag;

tensor ramp(std::int64_t n, float start) {
  tensor t({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = start + 0.001f * static_cast<float>(i);
  return t;
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.nbytes() == b.nbytes() && a.type() == b.type() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

struct channel_pair {
  std::string tag = fresh_shm_tag();
  shm::shard_channel worker;
  shm::worker_channels shard{tag};
  channel_pair() {
    auto c = shm::shard_channel::create(tag, shm::slot_bytes_for(1000), 3);
    BOOST_REQUIRE_MESSAGE(c.has_value(), (c ? std::string() : c.error().message));
    worker = std::move(*c);
  }
  // One pull answered through the channel.
  tensor pull(const tensor& params) {
    auto slot = worker.lend_reply_slot();
    BOOST_REQUIRE(slot.has_value());
    std::string refused;
    auto where = shard.answer(3, *slot, params, refused);
    BOOST_REQUIRE_MESSAGE(where.has_value(), refused);
    auto got = worker.take_reply(*where);
    BOOST_REQUIRE_MESSAGE(got.has_value(), (got ? std::string() : got.error().message));
    return std::move(*got);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(tensors_cross_bit_exactly_both_ways) {
  channel_pair p;
  const std::string name = p.worker.name();
  BOOST_TEST(std::filesystem::exists("/dev/shm" + name));
  BOOST_TEST(!p.worker.put_push(ramp(1000, 1.0f)).has_value());  // not before the shard answered through it

  const tensor params = ramp(1000, -3.0f);
  BOOST_TEST(same_bits(p.pull(params), params));
  BOOST_TEST(p.worker.confirmed());
  BOOST_TEST(!std::filesystem::exists("/dev/shm" + name));  // mapped by both: the name is gone

  for (int step = 0; step < 3; ++step) {
    const tensor grad = ramp(1000, static_cast<float>(step));
    auto where = p.worker.put_push(grad);
    BOOST_REQUIRE(where.has_value());
    BOOST_TEST(where->dims == std::vector<std::int64_t>{1000});
    auto got = p.shard.take_push(3, *where);
    BOOST_REQUIRE_MESSAGE(got.has_value(), (got ? std::string() : got.error().message));
    BOOST_TEST(same_bits(*got, grad));
    p.worker.push_settled(false);
    const tensor next = ramp(1000, 10.0f + static_cast<float>(step));
    BOOST_TEST(same_bits(p.pull(next), next));
  }
  BOOST_TEST(p.shard.mapped() == 1u);
  p.shard.forget(3);
  BOOST_TEST(p.shard.mapped() == 0u);
}

BOOST_AUTO_TEST_CASE(a_member_keeps_several_channels_and_the_least_used_is_unmapped_beyond_the_cap) {
  const std::string tag = fresh_shm_tag();
  shm::worker_channels shard{tag};
  std::vector<shm::shard_channel> mine;
  auto answer_through = [&](shm::shard_channel& c, float v) {
    auto slot = c.lend_reply_slot();
    BOOST_REQUIRE(slot.has_value());
    std::string refused;
    auto where = shard.answer(3, *slot, ramp(100, v), refused);
    BOOST_REQUIRE_MESSAGE(where.has_value(), refused);
    auto got = c.take_reply(*where);
    BOOST_REQUIRE(got.has_value());
    BOOST_TEST(same_bits(*got, ramp(100, v)));
  };
  for (std::size_t i = 0; i < shm::worker_channels::max_per_member + 1; ++i) {
    auto c = shm::shard_channel::create(tag, shm::slot_bytes_for(100), 3);
    BOOST_REQUIRE(c.has_value());
    mine.push_back(std::move(*c));
    answer_through(mine.back(), static_cast<float>(i));
    if (i == 0) continue;
    answer_through(mine.front(), 0.5f);  // the first stays in use
  }
  BOOST_TEST(shard.mapped() == shm::worker_channels::max_per_member);
  // Every channel but the one unmapped (the second, used least recently) still takes pushes;
  // the unmapped one's name is gone (confirmed), so the shard cannot map it again.
  for (std::size_t i = 0; i < mine.size(); ++i) {
    auto where = mine[i].put_push(ramp(100, 7.f));
    BOOST_REQUIRE(where.has_value());
    auto got = shard.take_push(3, *where);
    BOOST_TEST(got.has_value() == (i != 1), "channel " << i);
    mine[i].push_settled(false);
  }
}

BOOST_AUTO_TEST_CASE(a_slot_is_lent_to_one_request_at_a_time) {
  channel_pair p;
  p.pull(ramp(1000, 0.0f));
  BOOST_REQUIRE(p.worker.put_push(ramp(1000, 1.0f)).has_value());
  BOOST_TEST(!p.worker.put_push(ramp(1000, 2.0f)).has_value());  // the first is not answered yet
  p.worker.push_settled(false);
  BOOST_TEST(p.worker.put_push(ramp(1000, 2.0f)).has_value());

  BOOST_REQUIRE(p.worker.lend_reply_slot().has_value());
  BOOST_TEST(!p.worker.lend_reply_slot().has_value());
  p.worker.reply_failed(false);  // a refused pull gives the slot back
  BOOST_TEST(p.worker.lend_reply_slot().has_value());

  BOOST_TEST(!p.worker.put_push(ramp(1001, 0.0f)).has_value());  // too large for the slot: in the message
}

BOOST_AUTO_TEST_CASE(a_gradient_packed_into_the_slot_crosses_without_a_copy) {
  channel_pair p;
  BOOST_TEST(!p.worker.lend_push_buffer(1000).has_value());  // not before the channel is confirmed
  p.pull(ramp(1000, 0.0f));
  auto buffer = p.worker.lend_push_buffer(1000);
  BOOST_REQUIRE(buffer.has_value());
  BOOST_TEST(p.worker.holds(buffer->bytes()));
  BOOST_TEST(!p.worker.lend_push_buffer(1000).has_value());  // lent already
  const tensor grad = ramp(1000, 7.0f);
  std::memcpy(buffer->bytes(), grad.bytes(), grad.nbytes());
  auto where = p.worker.put_push(*buffer);
  BOOST_REQUIRE(where.has_value());
  auto borrowed = p.shard.take_push(3, *where, true);
  BOOST_REQUIRE(borrowed.has_value());
  BOOST_TEST(same_bits(*borrowed, grad));
  auto copied = p.shard.take_push(3, *where, false);
  BOOST_REQUIRE(copied.has_value());
  BOOST_TEST(same_bits(*copied, grad));
  BOOST_TEST(copied->bytes() != borrowed->bytes());
  BOOST_TEST(!p.worker.put_push(grad).has_value());  // the slot stays lent until the push is answered
  p.worker.push_settled(false);
  BOOST_TEST(p.worker.lend_push_buffer(1000).has_value());
}

BOOST_AUTO_TEST_CASE(a_timeout_closes_the_channel) {
  channel_pair p;
  p.pull(ramp(1000, 0.0f));
  BOOST_REQUIRE(p.worker.put_push(ramp(1000, 1.0f)).has_value());
  p.worker.push_settled(true);
  BOOST_TEST(p.worker.closed());
  BOOST_TEST(!p.worker.put_push(ramp(1000, 1.0f)).has_value());
  BOOST_TEST(!p.worker.lend_reply_slot().has_value());
}

BOOST_AUTO_TEST_CASE(stale_torn_and_out_of_bounds_slots_are_refused) {
  channel_pair p;
  p.pull(ramp(1000, 0.0f));
  auto where = p.worker.put_push(ramp(1000, 5.0f));
  BOOST_REQUIRE(where.has_value());
  auto refused = [&](shared_tensor w, const char* expect) {
    auto got = p.shard.take_push(3, w);
    BOOST_REQUIRE(!got.has_value());
    BOOST_TEST(got.error().message.find(expect) != std::string::npos, got.error().message);
  };
  shared_tensor stale = *where;
  stale.ticket += 1;
  refused(stale, "no longer holds ticket");
  shared_tensor outside = *where;
  outside.offset = 1 << 30;
  refused(outside, "not inside the segment");
  shared_tensor misaligned = *where;
  misaligned.offset += 8;
  refused(misaligned, "not inside the segment");
  shared_tensor lying = *where;
  lying.capacity = std::uint64_t{1} << 40;
  refused(lying, "not inside the segment");
  shared_tensor larger = *where;
  larger.dims = {1500};
  refused(larger, "does not fit");
  shared_tensor huge = *where;
  huge.dims = {100000};
  refused(huge, "extent");
  shared_tensor bad_dtype = *where;
  bad_dtype.dtype = 200;
  refused(bad_dtype, "unknown dtype");
  shared_tensor negative = *where;
  negative.dims = {-4};
  refused(negative, "extent");
  // The slot is overwritten by the next push: the old ticket is refused, the new one taken.
  p.worker.push_settled(false);
  auto next = p.worker.put_push(ramp(1000, 6.0f));
  BOOST_REQUIRE(next.has_value());
  refused(*where, "no longer holds ticket");
  BOOST_TEST(p.shard.take_push(3, *next).has_value());

  // A reply naming a slot the worker did not lend.
  shared_tensor not_lent = *next;
  BOOST_TEST(!p.worker.take_reply(not_lent).has_value());
}

BOOST_AUTO_TEST_CASE(a_member_cannot_name_another_members_channel) {
  channel_pair p;  // member 3's
  auto slot = p.worker.lend_reply_slot();
  BOOST_REQUIRE(slot.has_value());
  std::string why;
  BOOST_TEST(!p.shard.answer(4, *slot, ramp(1000, 0.0f), why).has_value());  // member 4 names it
  BOOST_TEST(why.find("member 3's, not member 4's") != std::string::npos, why);
  auto push = p.shard.take_push(4, *slot);
  BOOST_TEST(!push.has_value());
  std::string fine;
  BOOST_TEST(p.shard.answer(3, *slot, ramp(1000, 0.0f), fine).has_value());
}

BOOST_AUTO_TEST_CASE(another_jobs_shard_answers_in_the_message) {
  channel_pair p;
  shm::worker_channels stranger(fresh_shm_tag());
  auto slot = p.worker.lend_reply_slot();
  BOOST_REQUIRE(slot.has_value());
  std::string why;
  BOOST_TEST(!stranger.answer(0, *slot, ramp(1000, 0.0f), why).has_value());
  BOOST_TEST(why.find("not one of this job's") != std::string::npos, why);
  std::string again;
  BOOST_TEST(!stranger.answer(0, *slot, ramp(1000, 0.0f), again).has_value());
  BOOST_TEST(again.empty());  // said once, not per pull
  BOOST_TEST(!stranger.take_push(0, *slot).has_value());
  BOOST_TEST(!p.worker.confirmed());

  // A slot too small for the answer: in the message as well.
  std::string small_why;
  BOOST_TEST(!p.shard.answer(1, *slot, ramp(2000, 0.0f), small_why).has_value());
}
