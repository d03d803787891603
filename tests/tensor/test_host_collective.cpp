// Tests for tensor/host_collective.cpp: threads of one process all-reduce in place and get
// the rank-order sum bit for bit, round after round; a member that never arrives (or never
// joins) makes the others fail within the timeout instead of hanging; mismatched buffers
// are refused.
#define BOOST_TEST_MODULE host_collective
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tensor/host_collective.hpp"
#include "tensor/random.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

std::vector<float> values(int rank, int round, std::size_t n) {
  rng r(static_cast<std::uint64_t>(rank * 100 + round + 1));
  std::vector<float> v(n);
  for (auto& x : v) x = r.normal();
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_member_gets_the_rank_order_sum) {
  const int ranks = 4, rounds = 3;
  const std::size_t n = 1000, m = 7;
  const auto id = host_collective::new_id();
  std::vector<std::vector<std::vector<float>>> got(ranks);  // rank, round -> buffer a then b
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto c = host_collective::open(id, ranks, r, 10s);
      if (!c) {
        errors[r] = c.error().message;
        return;
      }
      for (int round = 0; round < rounds; ++round) {
        auto a = values(r, round, n), b = values(r, round + 50, m);
        float* bufs[] = {a.data(), b.data()};
        const std::int64_t counts[] = {static_cast<std::int64_t>(n), static_cast<std::int64_t>(m)};
        if (auto why = (*c)->all_reduce(bufs, counts, 2); !why.empty()) errors[r] = why;
        got[r].push_back(a);
        got[r].push_back(b);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) BOOST_TEST(errors[r].empty(), errors[r]);
  for (int round = 0; round < rounds; ++round)
    for (int which = 0; which < 2; ++which) {
      const std::size_t len = which ? m : n;
      std::vector<float> want = values(0, round + 50 * which, len);
      for (int r = 1; r < ranks; ++r) {
        const auto v = values(r, round + 50 * which, len);
        for (std::size_t k = 0; k < len; ++k) want[k] += v[k];
      }
      for (int r = 0; r < ranks; ++r)
        BOOST_TEST(std::memcmp(got[r][2 * round + which].data(), want.data(), len * sizeof(float)) == 0);
    }
}

BOOST_AUTO_TEST_CASE(a_member_that_never_arrives_fails_the_others_in_time) {
  const auto id = host_collective::new_id();
  std::vector<std::string> errors(3);
  std::unique_ptr<host_collective> silent;
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {  // Boost.Test's assertions are not thread-safe: none in here
      auto c = host_collective::open(id, 3, r, 5s);
      if (!c) {
        errors[r] = "open failed: " + c.error().message;
        return;
      }
      if (r == 2) {
        silent = std::move(*c);  // joins, then never calls all_reduce
        return;
      }
      float x = 1.f;
      float* bufs[] = {&x};
      const std::int64_t counts[] = {1};
      std::unique_ptr<host_collective> mine = std::move(*c);
      errors[r] = mine->all_reduce(bufs, counts, 1);
    });
  for (auto& t : threads) t.join();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < 2; ++r) BOOST_TEST(errors[r].find("did one die?") != std::string::npos, errors[r]);
  BOOST_TEST(waited < 15.0);
  BOOST_REQUIRE_MESSAGE(silent, errors[2]);
  // The group stays broken: the latecomer is told so at once.
  float y = 2.f;
  float* bufs[] = {&y};
  const std::int64_t counts[] = {1};
  BOOST_TEST(!silent->all_reduce(bufs, counts, 1).empty());
}

BOOST_AUTO_TEST_CASE(a_member_that_never_joins_fails_the_open) {
  const auto id = host_collective::new_id();
  auto c = host_collective::open(id, 2, 0, 200ms);
  BOOST_REQUIRE(!c.has_value());
  BOOST_TEST(c.error().message.find("only 1 of 2 members joined") != std::string::npos, c.error().message);
}

BOOST_AUTO_TEST_CASE(members_must_pass_the_same_buffers) {
  const auto id = host_collective::new_id();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {  // no Boost.Test assertions in here: they are not thread-safe
      auto c = host_collective::open(id, 2, r, 5s);
      if (!c) {
        errors[r] = "open failed: " + c.error().message;
        return;
      }
      std::vector<float> v(r == 0 ? 4 : 5, 1.f);
      float* bufs[] = {v.data()};
      const std::int64_t counts[] = {static_cast<std::int64_t>(v.size())};
      errors[r] = (*c)->all_reduce(bufs, counts, 1);
    });
  for (auto& t : threads) t.join();
  BOOST_TEST((!errors[0].empty() || !errors[1].empty()));
  BOOST_TEST((errors[0] + errors[1]).find("different sizes") != std::string::npos, errors[0] + errors[1]);
}
