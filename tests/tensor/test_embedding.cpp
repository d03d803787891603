// Tests for tensor/embedding.cpp: each position gets its token's row plus its position's
// row, the gradients sum by token and by position, and an input that is not a token id is
// refused with a message naming the position.
#define BOOST_TEST_MODULE embedding
#include <boost/test/unit_test.hpp>

#include "tensor/embedding.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(a_position_gets_its_token_row_plus_its_position_row) {
  tensor table = test::vec({0, 1, 10, 11, 20, 21});  // 3 tokens, width 2
  table.reshape({3, 2});
  tensor pos = test::vec({100, 200, 300, 400});  // 2 positions
  pos.reshape({2, 2});
  tensor ids = test::vec({2, 0, 1, 1});  // 2 sequences of 2
  ids.reshape({2, 2});
  tensor out({2, 2, 2});
  embedding_forward(out, ids, table, pos);
  const float want[] = {120, 221, 300, 401, 110, 211, 310, 411};
  for (int i = 0; i < 8; ++i) BOOST_TEST(out.data<float>()[i] == want[i]);
}

BOOST_AUTO_TEST_CASE(gradients_sum_by_token_and_by_position) {
  tensor ids = test::vec({2, 0, 2, 2});
  ids.reshape({2, 2});
  tensor g = test::vec({1, 2, 3, 4, 5, 6, 7, 8});
  g.reshape({2, 2, 2});
  tensor dtable({3, 2}), dpos({2, 2});
  dtable.data<float>()[2] = 0.5f;  // accumulates onto what is there
  embedding_backward(dtable, dpos, g, ids);
  const float want_table[] = {3, 4, 0.5f, 0, 1 + 5 + 7, 2 + 6 + 8};
  for (int i = 0; i < 6; ++i) BOOST_TEST(dtable.data<float>()[i] == want_table[i]);
  const float want_pos[] = {1 + 5, 2 + 6, 3 + 7, 4 + 8};
  for (int i = 0; i < 4; ++i) BOOST_TEST(dpos.data<float>()[i] == want_pos[i]);
}

BOOST_AUTO_TEST_CASE(an_input_that_is_not_a_token_id_is_refused_by_position) {
  tensor table({3, 2}), pos({2, 2}), out({1, 2, 2});
  for (float bad : {3.f, -1.f, 0.5f}) {
    tensor ids = test::vec({0, bad});
    ids.reshape({1, 2});
    try {
      embedding_forward(out, ids, table, pos);
      BOOST_FAIL("accepted the id " << bad);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      BOOST_TEST(what.find("position 1") != std::string::npos, what);
      BOOST_TEST(what.find("[0, 3)") != std::string::npos, what);
    }
  }
}
