// Tests for transport/lane.hpp and lane.cpp: a message and its payload meet in either order,
// abandoned and closed keys drop what comes, and descriptors shape payloads or say why
// they do not fit.
#define BOOST_TEST_MODULE lane
#include <boost/test/unit_test.hpp>

#include <string>

#include "transport/lane.hpp"

using namespace troupe;
using namespace troupe::lane;

namespace {

tensor floats(std::int64_t n, float first) {
  tensor t({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = first + static_cast<float>(i);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_payload_that_comes_first_waits_for_its_message) {
  rendezvous<std::string> r;
  BOOST_TEST(!r.payload({1, 7}, floats(3, 10.f)).has_value());
  BOOST_TEST(r.kept(1) == 1u);
  std::string waiter = "reply 7";
  auto t = r.wait({1, 7}, std::move(waiter));
  BOOST_REQUIRE(t.has_value());
  BOOST_TEST(t->data<float>()[2] == 12.f);
  BOOST_TEST(waiter == "reply 7");  // left as it was: the caller goes on with it
  BOOST_TEST(r.kept(1) == 0u);
}

BOOST_AUTO_TEST_CASE(a_message_that_comes_first_waits_for_its_payload) {
  rendezvous<std::string> r;
  BOOST_TEST(!r.wait({2, 5}, std::string("reply 5")).has_value());
  BOOST_TEST(r.waits({2, 5}));
  BOOST_TEST(!r.payload({2, 6}, floats(1, 0.f)).has_value());  // another ticket does not wake it
  auto met = r.payload({2, 5}, floats(2, 3.f));
  BOOST_REQUIRE(met.has_value());
  BOOST_TEST(met->waiter == "reply 5");
  BOOST_TEST(met->payload.data<float>()[1] == 4.f);
  BOOST_TEST(!r.waits({2, 5}));
}

BOOST_AUTO_TEST_CASE(an_abandoned_ticket_drops_its_payload_now_or_later) {
  rendezvous<int> r;
  r.wait({3, 1}, 11);
  r.abandon({3, 1});  // the call timed out: its payload comes later and is dropped
  BOOST_TEST(!r.payload({3, 1}, floats(1, 0.f)).has_value());
  BOOST_TEST(r.kept(3) == 0u);
  r.payload({3, 2}, floats(1, 0.f));
  r.abandon({3, 2});  // already here: dropped at once
  BOOST_TEST(r.kept(3) == 0u);
  BOOST_TEST(!r.take({3, 2}).has_value());
}

BOOST_AUTO_TEST_CASE(closing_a_peer_returns_its_waiters_and_drops_its_payloads) {
  rendezvous<int> r;
  r.wait({4, 1}, 41);
  r.wait({4, 2}, 42);
  r.wait({5, 1}, 51);
  r.payload({4, 9}, floats(1, 0.f));
  r.payload({5, 9}, floats(1, 0.f));
  const auto failed = r.close(4);
  BOOST_TEST(failed == (std::vector<int>{41, 42}));
  BOOST_TEST(r.kept(4) == 0u);
  BOOST_TEST(r.kept(5) == 1u);  // another peer's are untouched
  BOOST_TEST(r.waits({5, 1}));
  BOOST_TEST(r.close(UINT32_MAX).empty());  // the largest peer id is a peer like any
}

BOOST_AUTO_TEST_CASE(a_descriptor_shapes_its_payload) {
  tensor t = floats(6, 0.f);
  const lane_tensor d = describe(42, tensor::uninitialized({2, 3}));
  BOOST_TEST(d.ticket == 42u);
  BOOST_TEST((d.dims == std::vector<std::int64_t>{2, 3}));
  auto s = shaped(std::move(t), d);
  BOOST_REQUIRE(s.has_value());
  BOOST_TEST(s->rank() == 2);
  BOOST_TEST(s->size(1) == 3);
  BOOST_TEST(s->data<float>()[5] == 5.f);
}

BOOST_AUTO_TEST_CASE(a_payload_that_does_not_fit_its_descriptor_is_named) {
  auto says = [](expected<tensor> r, const std::string& what) {
    return !r && r.error().message.find(what) != std::string::npos;
  };
  BOOST_TEST(says(shaped(floats(6, 0.f), lane_tensor{1, 0, {7}}), "names 7 elements but its lane payload holds 6"));
  BOOST_TEST(says(shaped(floats(6, 0.f), lane_tensor{1, 2, {6}}), "names a bf16 tensor"));
  BOOST_TEST(says(shaped(floats(6, 0.f), lane_tensor{1, 99, {6}}), "names a unknown tensor"));
  BOOST_TEST(says(shaped(floats(6, 0.f), lane_tensor{1, 0, {}}), "rank 0"));
  BOOST_TEST(says(shaped(floats(6, 0.f), lane_tensor{1, 0, {-2, -3}}), "impossible extents"));
  BOOST_TEST(says(shaped(floats(6, 0.f), lane_tensor{1, 0, {INT64_MAX, 4}}), "impossible extents"));
}
