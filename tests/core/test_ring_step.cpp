// Tests for core/ring_step.cpp: two members' ring steps sum their gradients in place;
// the reduce-scatter is reported before the all-gather, once each, and the collective
// ends with the all-gather; a piece of the next collective is held until it starts and
// then given to it, while one further ahead is refused; a spec that does not fit is
// refused with a reason; the simulated gradient is the synthetic one's copy, kept.
#define BOOST_TEST_MODULE ring_step
#include <boost/test/unit_test.hpp>

#include <deque>

#include "core/ring_step.hpp"

using namespace troupe;
using verdict = ring_early::verdict;

namespace {

ring_spec spec(std::uint32_t rank, std::uint64_t collective) {
  return ring_spec{.world = 2, .rank = rank, .collective = collective, .piece_elems = 2};
}

tensor filled(std::int64_t n, float v) {
  tensor t(shape{n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = v + static_cast<float>(i);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(two_members_sum_their_gradients_and_report_each_phase_once) {
  tensor a = filled(6, 1.0f), b = filled(6, 10.0f);
  ring_step r[2];
  std::deque<ring_piece> to[2];  // pieces in flight to each rank
  for (std::uint32_t k = 0; k < 2; ++k) {
    auto first = r[k].start(spec(k, 4), (k == 0 ? a : b).view(), reduce_op::sum, {});
    BOOST_REQUIRE(first.has_value());
    for (ring_piece& p : *first) to[1 - k].push_back(std::move(p));
    const auto none = r[k].advance();
    BOOST_TEST(!none.scattered.has_value());
    BOOST_TEST(!none.gathered.has_value());
  }
  int scattered[2] = {0, 0}, gathered[2] = {0, 0};
  while (!to[0].empty() || !to[1].empty()) {
    for (std::uint32_t k = 0; k < 2; ++k) {
      if (to[k].empty()) continue;
      ring_piece p = std::move(to[k].front());
      to[k].pop_front();
      BOOST_REQUIRE(r[k].belongs(p));
      auto o = r[k].receive(std::move(p));
      BOOST_REQUIRE(!o.refused);
      for (ring_piece& q : o.send) to[1 - k].push_back(std::move(q));
      const auto pr = r[k].advance();
      if (pr.scattered) {
        ++scattered[k];
        BOOST_TEST(gathered[k] == 0);
        BOOST_TEST((pr.scattered->begin <= pr.scattered->end));
      }
      if (pr.gathered) {
        ++gathered[k];
        BOOST_TEST(pr.seconds >= 0.0);
        BOOST_TEST(!r[k].running());  // the collective ended with its all-gather
      }
    }
  }
  for (int k = 0; k < 2; ++k) {
    BOOST_TEST(scattered[k] == 1);
    BOOST_TEST(gathered[k] == 1);
  }
  for (std::int64_t i = 0; i < 6; ++i) {
    BOOST_TEST(a.data<float>()[i] == 11.0f + 2.0f * static_cast<float>(i));
    BOOST_TEST(b.data<float>()[i] == a.data<float>()[i]);
  }
}

BOOST_AUTO_TEST_CASE(the_next_collectives_pieces_wait_for_it_and_further_ones_are_refused) {
  tensor a = filled(4, 0.0f), b = filled(4, 0.0f);
  ring_step early, other;
  auto ahead = other.start(spec(0, 8), a.view(), reduce_op::sum, {});
  BOOST_REQUIRE(ahead.has_value() && !ahead->empty());
  BOOST_REQUIRE(early.start(spec(1, 7), b.view(), reduce_op::sum, {}).has_value());
  ring_piece p = ahead->front();
  BOOST_TEST(!early.belongs(p));
  BOOST_TEST((early.hold(p, 8, 16) == verdict::held));
  ring_piece far = p;
  far.collective = 10;
  BOOST_TEST((early.hold(far, 8, 16) == verdict::too_far));
  BOOST_TEST(early.take_early().empty());  // nothing of collective 7 was held
  tensor c = filled(4, 0.0f);
  BOOST_REQUIRE(early.start(spec(1, 8), c.view(), reduce_op::sum, {}).has_value());
  auto held = early.take_early();
  BOOST_REQUIRE(held.size() == 1u);
  BOOST_TEST(early.belongs(held.front()));
  BOOST_TEST(early.take_early().empty());  // once
}

BOOST_AUTO_TEST_CASE(a_spec_that_does_not_fit_is_refused_with_its_reason) {
  tensor a = filled(4, 0.0f);
  ring_step r;
  auto bad = r.start(ring_spec{.world = 2, .rank = 2, .collective = 0, .piece_elems = 2}, a.view(), reduce_op::sum, {});
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(!bad.error().message.empty());
  BOOST_TEST(!r.running());
}

BOOST_AUTO_TEST_CASE(the_simulated_gradient_starts_as_the_synthetic_one_and_is_kept) {
  ring_step r;
  const tensor synthetic = filled(3, 5.0f);
  tensor_view v = r.simulated_grads(synthetic);
  BOOST_TEST(v.data<float>()[2] == 7.0f);
  v.data<float>()[0] = -1.0f;  // what a collective left
  BOOST_TEST(r.simulated_grads(synthetic).data<float>()[0] == -1.0f);
  BOOST_TEST(synthetic.data<float>()[0] == 5.0f);  // a copy, not the synthetic gradient itself
}
