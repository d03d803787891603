// Tests for client/kvstore_collectives.cpp: the store checks a collective call's arrays
// before anything is sent (no data, an output shaped unlike the input: bad_shape naming
// both shapes, the output untouched), refuses calls on a closed store, and a group of one
// worker gets its own values back.
#define BOOST_TEST_MODULE kvstore_collectives
#include <boost/test/unit_test.hpp>
#include <functional>
#include <memory>
#include <vector>

#include "client/kvstore.hpp"
#include "tests/support/local_store.hpp"

using namespace troupe;
using kv::kvstore;
using test::contains;
using test::error_of;

namespace {

std::unique_ptr<kvstore> alone() {
  kv::options o;
  o.timeout = std::chrono::milliseconds(2000);
  return std::move(kvstore::open_local_group(o, 1).front());
}

}  // namespace

BOOST_AUTO_TEST_CASE(bad_arrays_are_refused_before_anything_is_sent) {
  auto s = alone();
  std::vector<float> in{1, 2, 3}, out(4, -1.f);
  auto [code, msg] = error_of([&] { s->allreduce({in.data(), {3}}, {out.data(), {4}}); });
  BOOST_TEST(code == "bad_shape");
  BOOST_TEST(contains(msg, "the input has shape (3,) but the output (4,)"), msg);
  BOOST_TEST((out == std::vector<float>(4, -1.f)));
  BOOST_TEST(error_of([&] { s->allreduce({nullptr, {3}}, {out.data(), {3}}); }).first == "bad_shape");
  BOOST_TEST(error_of([&] { s->allreduce({in.data(), {3}}, {nullptr, {3}}); }).first == "bad_shape");
  BOOST_TEST(error_of([&] { s->broadcast({nullptr, {3}}, 0); }).second.find("broadcast: no data") != std::string::npos);
  BOOST_TEST(error_of([&] { s->allgather({nullptr, {2, 3}}); }).second.find("allgather: no data") != std::string::npos);
  // After the refusals the store still works: a group of one gets its own values back.
  std::vector<float> sum(3);
  s->allreduce({in.data(), {3}}, {sum.data(), {3}}, kvstore::reduction::sum, "after");
  BOOST_TEST((sum == in));
  auto g = s->allgather({in.data(), {1, 3}});
  BOOST_TEST((g.data == in));
  BOOST_TEST((g.shape == std::vector<std::int64_t>{1, 3}));
}

BOOST_AUTO_TEST_CASE(a_closed_store_refuses_collectives) {
  auto s = alone();
  s->close();
  std::vector<float> v{1, 2};
  for (auto call : std::vector<std::function<void()>>{[&] {
                                                        s->allreduce({v.data(), {2}}, {v.data(), {2}});
                                                      },
                                                      [&] {
                                                        s->broadcast({v.data(), {2}}, 0);
                                                      },
                                                      [&] {
                                                        s->allgather({v.data(), {1, 2}});
                                                      }}) {
    auto [code, msg] = error_of(call);
    BOOST_TEST(code == "closed", msg);
  }
  BOOST_TEST((v == std::vector<float>{1, 2}));
}
