// Tests for transport/frame_bound.cpp: the process-wide bound is 64 MiB until a shell sets
// it from its job.
#define BOOST_TEST_MODULE frame_bound
#include <boost/test/unit_test.hpp>

#include "transport/frame_bound.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(the_bound_is_64_mib_until_a_job_sets_it) {
  BOOST_TEST(frame_bound() == frame_bound_before_the_job);
  BOOST_TEST(frame_bound_before_the_job == std::uint64_t{64} << 20);
  set_frame_bound(12345);
  BOOST_TEST(frame_bound() == 12345u);
}
