// Tests for train/sampler.cpp: per-epoch permutations are deterministic, shards are
// disjoint and equal in size, and batches gather the right rows.
#define BOOST_TEST_MODULE sampler
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <set>

#include "train/sampler.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(single_rank_gets_a_permutation) {
  auto a = epoch_indices(1000, 1, 0, 0, 1);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 1000; ++i) BOOST_TEST(sorted[i] == i);
  BOOST_TEST(a != sorted);  // shuffled
  BOOST_TEST(a == epoch_indices(1000, 1, 0, 0, 1));
  BOOST_TEST(a != epoch_indices(1000, 1, 1, 0, 1));
  BOOST_TEST(a != epoch_indices(1000, 2, 0, 0, 1));
}

BOOST_AUTO_TEST_CASE(shards_are_disjoint_and_equal) {
  const int world = 3;
  std::set<std::int64_t> seen;
  for (int r = 0; r < world; ++r) {
    auto mine = epoch_indices(1001, 9, 4, r, world);
    BOOST_TEST(mine.size() == 333u);
    for (auto i : mine) BOOST_TEST(seen.insert(i).second);
  }
  BOOST_TEST(seen.size() == 999u);
  BOOST_CHECK_THROW(epoch_indices(10, 1, 0, 3, 3), contract_error);
}

BOOST_AUTO_TEST_CASE(gather_copies_rows_and_labels) {
  auto s = make_synthetic(20, 1, 2);
  std::vector<std::int64_t> idx = {5, 0, 19};
  tensor x(s.train.sample_shape().prepend(3)), y({3}, dtype::i32);
  gather_batch(x, y, s.train, idx);
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(y.data<std::int32_t>()[i] == s.train.labels.data<std::int32_t>()[idx[i]]);
    BOOST_TEST(x.data<float>()[i * 784 + 17] == s.train.images.data<float>()[idx[i] * 784 + 17]);
  }
  std::vector<std::int64_t> bad = {20};
  BOOST_CHECK_THROW(gather_batch(x.view().slice(0, 1), y.view().slice(0, 1), s.train, bad), contract_error);
}
