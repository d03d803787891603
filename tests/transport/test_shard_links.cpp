// shard_links: a member's links choose how each call to a shard travels, against a real
// shard end (shm::worker_channels) in this process: a shard in this process or not called
// gets no slot and whole slices; one in another process without the fast path goes over
// the network in pieces; with it, a pull's slot confirms the channel, a push packed into
// the lent buffer is sealed in its slot bit-exact, an unlent (encoded) push is copied into
// a free slot only when asked, a shard that answers in the message sends the member's
// calls over the network from then on, a timed-out push closes its channel, and wiring
// again starts afresh.
#define BOOST_TEST_MODULE shard_links
#include <boost/test/unit_test.hpp>
#include <cstring>

#include "tests/support/shm_tag.hpp"
#include "transport/shard_links.hpp"

using namespace troupe;
using reach = shard_links::reach;

namespace {

constexpr std::uint32_t rank = 1;
constexpr std::int64_t n = 1000;
// A training member's limits: one channel per shard, sized for the call.
constexpr shm::channel_pool::limits one{1, 1, 0};

struct links_and_shard {
  explicit links_and_shard(std::vector<reach> r = {reach::other_process, reach::other_process})
      : links(std::move(r), {tag, rank, one}) {}
  std::string tag = test::fresh_shm_tag();
  shard_links links;
  shm::worker_channels shard{tag};

  // One pull of shard s answered in the slot its link offered.
  void confirm(std::uint32_t s) {
    auto call = links.route_pull(s, n);
    BOOST_REQUIRE(call.has_value());
    std::string refused;
    auto where = shard.answer_with(
        rank, call->where, {n}, [](tensor_view out) { for (std::int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = 0.f; }, refused);
    BOOST_REQUIRE_MESSAGE(where.has_value(), refused);
    auto got = links.take_reply(s, call->channel, *where);
    BOOST_REQUIRE_MESSAGE(got.has_value(), (got ? std::string() : got.error().message));
    BOOST_TEST((links.reply_settled(s, call->channel, false, false) == shm::channel_pool::settled::nothing));
  }
};

tensor ramp(std::int64_t numel) {
  tensor t({numel});
  for (std::int64_t i = 0; i < numel; ++i) t.data<float>()[i] = 0.25f * static_cast<float>(i);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_shard_in_this_process_or_not_called_gets_no_slot_and_whole_slices) {
  links_and_shard p({reach::this_process, reach::absent});
  for (std::uint32_t s : {0u, 1u, 7u}) {  // 7: no such shard
    BOOST_TEST(p.links.whole_slices(s));
    BOOST_TEST(!p.links.over_the_network(s));
    BOOST_TEST(!p.links.route_pull(s, n).has_value());
    BOOST_TEST(p.links.push_buffer(s, n).empty());
  }
  tensor g = ramp(n);
  BOOST_TEST(!p.links.route_push(0, g).has_value());
  BOOST_TEST(g.numel() == n);  // left for the message, which shares it
}

BOOST_AUTO_TEST_CASE(without_the_fast_path_another_process_is_over_the_network_in_pieces) {
  shard_links links({reach::other_process}, {"", rank, one});
  BOOST_TEST(links.over_the_network(0));
  BOOST_TEST(!links.whole_slices(0));
  BOOST_TEST(!links.route_pull(0, n).has_value());
  BOOST_TEST(links.push_buffer(0, n).empty());
  shard_links unwired;  // before the welcome: nothing is known, nothing is lent
  BOOST_TEST(unwired.size() == 0u);
  BOOST_TEST(!unwired.over_the_network(0));
}

BOOST_AUTO_TEST_CASE(a_push_packed_into_the_lent_buffer_is_sealed_in_its_slot_bit_exact) {
  links_and_shard p;
  BOOST_TEST(p.links.whole_slices(0));         // still to be tried through shared memory
  BOOST_TEST(!p.links.over_the_network(0));
  BOOST_TEST(p.links.push_buffer(0, n).empty());  // no confirmed channel yet
  p.confirm(0);
  tensor g = p.links.push_buffer(0, n);
  BOOST_REQUIRE(g.numel() == n);
  const tensor want = ramp(n);
  std::memcpy(g.bytes(), want.bytes(), want.nbytes());
  auto call = p.links.route_push(0, g);
  BOOST_REQUIRE(call.has_value());
  BOOST_TEST(g.empty());  // it travels in the slot, not the message
  auto seen = p.shard.take_push(rank, call->where);
  BOOST_REQUIRE_MESSAGE(seen.has_value(), (seen ? std::string() : seen.error().message));
  BOOST_TEST(std::memcmp(seen->bytes(), want.bytes(), want.nbytes()) == 0);
  BOOST_TEST(p.links.push_buffer(0, n).empty());  // its one push slot is in flight
  BOOST_TEST(!p.links.push_settled(0, call->channel, false));
  BOOST_TEST(p.links.push_buffer(0, n).numel() == n);  // free again
}

BOOST_AUTO_TEST_CASE(an_unlent_push_is_copied_into_a_free_slot_only_when_asked) {
  links_and_shard p;
  p.confirm(1);
  tensor encoded = ramp(n / 4);
  BOOST_TEST(!p.links.route_push(1, encoded, false).has_value());
  BOOST_TEST(encoded.numel() == n / 4);  // left for the message
  auto call = p.links.route_push(1, encoded);
  BOOST_REQUIRE(call.has_value());
  BOOST_TEST(encoded.empty());
  auto seen = p.shard.take_push(rank, call->where);
  BOOST_REQUIRE(seen.has_value());
  BOOST_TEST(seen->data<float>()[n / 4 - 1] == 0.25f * static_cast<float>(n / 4 - 1));
  p.links.push_settled(1, call->channel, false);
}

BOOST_AUTO_TEST_CASE(a_shard_that_answers_in_the_message_is_reached_over_the_network_from_then_on) {
  links_and_shard p;
  auto call = p.links.route_pull(0, n);
  BOOST_REQUIRE(call.has_value());
  BOOST_TEST((p.links.reply_settled(0, call->channel, true, false) == shm::channel_pool::settled::declined));
  BOOST_TEST(p.links.over_the_network(0));
  BOOST_TEST(!p.links.whole_slices(0));  // pieces per bucket again, as over any network
  BOOST_TEST(!p.links.route_pull(0, n).has_value());
  BOOST_TEST(!p.links.over_the_network(1));  // another shard may still map the slots
}

BOOST_AUTO_TEST_CASE(a_timed_out_push_closes_its_channel_and_wiring_again_starts_afresh) {
  links_and_shard p;
  p.confirm(0);
  tensor g = p.links.push_buffer(0, n);
  BOOST_REQUIRE(!g.empty());
  auto call = p.links.route_push(0, g);
  BOOST_REQUIRE(call.has_value());
  BOOST_TEST(p.links.push_settled(0, call->channel, true));  // closed: the shard may still read it
  BOOST_TEST(p.links.push_buffer(0, n).empty());
  BOOST_TEST(!p.links.route_pull(0, n).has_value());  // one channel per shard, and it is closed
  p.links.wire({reach::other_process}, {p.tag, rank, one});
  BOOST_TEST(p.links.size() == 1u);
  BOOST_TEST(p.links.route_pull(0, n).has_value());  // a fresh pool
}
