// shard_call: one call's slots from its start to its settling, against a real shard end
// (shm::worker_channels) in this process: a pull's answer taken from the slot it offered
// and the slot free again once settled; an answer in shared memory the call did not
// offer (or with no links at all) refused with the shard named; a push held in its slot
// until settled, and a timed-out one closing its channel with the reason for the log;
// an answer in the message to an offered slot saying the shard declined; settling twice
// changes nothing.
#define BOOST_TEST_MODULE shard_call
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <memory>

#include "tests/support/shm_tag.hpp"
#include "transport/shard_call.hpp"

using namespace troupe;
using reach = shard_links::reach;
using settled = shm::channel_pool::settled;

namespace {

constexpr std::uint32_t rank = 2;
constexpr std::int64_t n = 512;
constexpr shm::channel_pool::limits one{1, 1, 0};  // a training member's: one channel per shard

struct links_and_shard {
  std::string tag = test::fresh_shm_tag();
  std::shared_ptr<shard_links> links =
      std::make_shared<shard_links>(std::vector<reach>{reach::other_process}, shard_links::options{tag, rank, one});
  shm::worker_channels shard{tag};

  // The shard writes `value` into the reply slot `where` names; the descriptor of its answer.
  shared_tensor answer(const shared_tensor& where, float value) {
    std::string refused;
    auto at = shard.answer_with(
        rank, where, {n}, [value](tensor_view out) { for (std::int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = value; },
        refused);
    BOOST_REQUIRE_MESSAGE(at.has_value(), refused);
    return *at;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_pull_takes_its_answer_from_the_slot_it_offered_and_frees_it_when_settled) {
  links_and_shard p;
  shard_call call(p.links, 0);
  const shared_tensor where = call.offer_reply(n);
  BOOST_REQUIRE(!where.empty());
  BOOST_TEST(call.offers_reply_slot());
  BOOST_TEST(!call.reply_channel_name().empty());
  BOOST_TEST(shard_call(p.links, 0).offer_reply(n).empty());  // its one reply slot is lent
  auto got = call.take_reply(p.answer(where, 1.5f));
  BOOST_REQUIRE_MESSAGE(got.has_value(), (got ? std::string() : got.error().message));
  BOOST_TEST(got->first);
  BOOST_TEST(got->values.numel() == n);
  BOOST_TEST(got->values.data<float>()[n - 1] == 1.5f);
  BOOST_TEST((call.settle_reply(false, false) == settled::nothing));
  BOOST_TEST(!call.offers_reply_slot());
  BOOST_TEST((call.settle_reply(false, true) == settled::nothing));  // twice: nothing more happens
  shard_call next(p.links, 0);
  BOOST_TEST(!next.offer_reply(n).empty());  // free again, on the same open channel
  BOOST_TEST(!p.links->over_the_network(0));
  next.settle_reply(false, false);
}

BOOST_AUTO_TEST_CASE(an_answer_in_shared_memory_not_offered_is_refused_naming_the_shard) {
  links_and_shard p;
  shard_call offered(p.links, 0);
  const shared_tensor at = p.answer(offered.offer_reply(n), 2.f);
  for (shard_call other : {shard_call(p.links, 0), shard_call(nullptr, 4)}) {
    auto got = other.take_reply(at);
    BOOST_REQUIRE(!got.has_value());
    const std::string why = got.error().message;
    BOOST_TEST(why.find("shard " + std::to_string(other.shard())) == 0, why);
    BOOST_TEST(why.find("did not offer") != std::string::npos, why);
    BOOST_TEST(why.find("troupe --version") != std::string::npos, why);  // and what to do
    BOOST_TEST((other.settle_reply(false, false) == settled::nothing));
  }
  auto got = offered.take_reply(at);  // the call that offered it still takes it
  BOOST_REQUIRE(got.has_value());
  BOOST_TEST(got->values.data<float>()[0] == 2.f);
  offered.settle_reply(false, false);
}

BOOST_AUTO_TEST_CASE(a_push_holds_its_slot_until_settled_and_a_timed_out_one_closes_the_channel) {
  links_and_shard p;
  shard_call pull(p.links, 0);  // a pull's answer in the slot confirms the channel
  BOOST_REQUIRE(pull.take_reply(p.answer(pull.offer_reply(n), 0.f)).has_value());
  pull.settle_reply(false, false);

  shard_call push(p.links, 0);
  tensor g = push.push_buffer(n);
  BOOST_REQUIRE(g.numel() == n);
  for (std::int64_t i = 0; i < n; ++i) g.data<float>()[i] = static_cast<float>(i);
  const shared_tensor where = push.route_push(g);
  BOOST_REQUIRE(!where.empty());
  BOOST_TEST(g.empty());
  BOOST_TEST(push.holds_push_slot());
  auto seen = p.shard.take_push(rank, where);
  BOOST_REQUIRE(seen.has_value());
  BOOST_TEST(seen->data<float>()[n - 1] == static_cast<float>(n - 1));
  BOOST_TEST(shard_call(p.links, 0).push_buffer(n).empty());  // its one push slot is in flight
  BOOST_TEST(!push.settle_push(false));
  BOOST_TEST(!push.holds_push_slot());

  shard_call late(p.links, 0);
  tensor h = late.push_buffer(n);
  BOOST_REQUIRE(!h.empty());
  BOOST_REQUIRE(!late.route_push(h).empty());
  BOOST_TEST(late.settle_push(true));  // closed: the shard may still read the slot
  BOOST_TEST(!late.settle_push(true));  // twice: nothing more happens
  BOOST_TEST(std::string(shard_call::why_push_closed()).find("timed out") != std::string::npos);
  BOOST_TEST(shard_call(p.links, 0).push_buffer(n).empty());
  BOOST_TEST(shard_call(p.links, 0).offer_reply(n).empty());
}

BOOST_AUTO_TEST_CASE(an_offered_slot_answered_in_the_message_says_the_shard_declined) {
  links_and_shard p;
  shard_call call(p.links, 0);
  BOOST_REQUIRE(!call.offer_reply(n).empty());
  const settled s = call.settle_reply(true, false);
  BOOST_TEST((s == settled::declined));
  BOOST_TEST(std::string(shard_call::why_closed(s)).find("could not map") != std::string::npos);
  BOOST_TEST(shard_call::closing_note(0, shard_call::why_closed(s)) ==
             "closes its shared-memory channel to shard 0 (the shard could not map it: another host, or shared "
             "memory unavailable there); its tensors go over the network");
  BOOST_TEST(shard_call::why_closed(settled::nothing) == nullptr);
  BOOST_TEST(std::string(shard_call::why_closed(settled::closed_by_timeout)).find("timed out") != std::string::npos);
  BOOST_TEST(p.links->over_the_network(0));
  shard_call after(p.links, 0);
  BOOST_TEST(after.offer_reply(n).empty());  // from then on over the network
  tensor g({n});
  BOOST_TEST(after.route_push(g).empty());
  BOOST_TEST(g.numel() == n);  // left for the message or a lane
}

BOOST_AUTO_TEST_CASE(a_call_with_no_links_never_holds_a_slot) {
  shard_call call(nullptr, 1);
  BOOST_TEST(call.push_buffer(n).empty());
  tensor g({n});
  BOOST_TEST(call.route_push(g).empty());
  BOOST_TEST(g.numel() == n);
  BOOST_TEST(call.offer_reply(n).empty());
  BOOST_TEST(!call.settle_push(true));
  BOOST_TEST((call.settle_reply(true, true) == settled::nothing));
  BOOST_TEST(call.reply_channel_name().empty());
}
