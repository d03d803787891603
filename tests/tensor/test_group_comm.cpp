// Tests for tensor/group_comm.cpp on the CPU backend (host_collective behind the backend
// table, as NCCL is behind the CUDA module's): a group opened from the leader's id sums
// several buffers in place on every member; a member that never joins makes the others'
// open fail with backend_error within the timeout; a buffer that is not contiguous f32 is
// refused before anything reaches the backend.
#define BOOST_TEST_MODULE group_comm
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/check.hpp"
#include "tensor/group_comm.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

backend_context open_cpu() {
  auto b = backend_context::open(cpu_device);
  BOOST_REQUIRE(b.has_value());
  return std::move(*b);
}

// n values first, first + 1, ...
tensor ramp(std::int64_t n, float first) {
  tensor t(shape{n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = first + static_cast<float>(i);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_member_gets_the_sum_of_each_buffer) {
  const backend_context cpu = open_cpu();
  const int ranks = 3;
  const auto id = group_comm::new_id(cpu);
  BOOST_TEST(!id.empty());
  std::vector<tensor> a(ranks), b(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<int> seen_rank(ranks, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        group_comm g(cpu, id, ranks, r, 10s);
        seen_rank[r] = g.rank();  // Boost.Test's checks are not thread-safe: they run after the join
        a[r] = ramp(5, 10.f * static_cast<float>(r));
        b[r] = ramp(3, -1.f * static_cast<float>(r));
        g.all_reduce_sum({a[r].view(), b[r].view()});
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    BOOST_TEST_CONTEXT("rank " << r) {
      BOOST_TEST(errors[r].empty(), errors[r]);
      BOOST_TEST(seen_rank[r] == r);
      // a: sum over r of (10 r + i) = 30 + 3 i; b: sum over r of (-r + i) = -3 + 3 i.
      for (std::int64_t i = 0; i < 5; ++i) BOOST_TEST(a[r].data<float>()[i] == 30.f + 3.f * static_cast<float>(i));
      for (std::int64_t i = 0; i < 3; ++i) BOOST_TEST(b[r].data<float>()[i] == -3.f + 3.f * static_cast<float>(i));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_member_that_never_joins_fails_the_open_within_the_timeout) {
  const backend_context cpu = open_cpu();
  const auto id = group_comm::new_id(cpu);
  const auto start = std::chrono::steady_clock::now();
  std::string why;
  try {
    group_comm g(cpu, id, 2, 0, 200ms);  // rank 1 never comes
  } catch (const backend_error& e) {
    why = e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  BOOST_TEST(!why.empty());
  BOOST_TEST(waited < 30s);  // bounded: a generous ceiling, not a timing target
}

BOOST_AUTO_TEST_CASE(buffers_that_are_not_contiguous_f32_are_refused) {
  const backend_context cpu = open_cpu();
  const auto id = group_comm::new_id(cpu);
  group_comm g(cpu, id, 1, 0, 10s);
  tensor halves(shape{4}, dtype::f16);
  BOOST_CHECK_THROW(g.all_reduce_sum({halves.view()}), contract_error);
  tensor alone = ramp(4, 1.f);
  g.all_reduce_sum({alone.view()});  // a group of one: the sum is the buffer itself
  for (std::int64_t i = 0; i < 4; ++i) BOOST_TEST(alone.data<float>()[i] == 1.f + static_cast<float>(i));
}
