// Tests for core/collective_rounds.cpp (Note [Collectives on the shards]): sums, averages,
// maxima, minima and products against hand-computed values in rank order, broadcast, allgather of uneven
// pieces, the size exchange; every giver gets the same answer only once all have given;
// a member lost before its piece fails the round for all, naming it, and one lost after
// does not; disagreeing pieces and reductions of NaN or infinity fail the round for all;
// duplicates, strangers, late joiners, bad shapes and dtypes, and the bound on waiting
// pieces are refused alone.
#define BOOST_TEST_MODULE collective_rounds
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "core/collective_rounds.hpp"

using namespace troupe;

namespace {

tensor floats(std::vector<float> v) {
  tensor t(shape{static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

kv_collective piece(std::uint32_t worker, std::string name, collective_kind kind, std::vector<float> v,
                    reduce_op op = reduce_op::sum) {
  kv_collective c;
  c.worker = worker;
  c.name = std::move(name);
  c.kind = kind;
  c.op = op;
  c.dims = {static_cast<std::int64_t>(v.size())};
  if (!v.empty()) c.data = floats(std::move(v));
  return c;
}

kv_collective reduce(std::uint32_t worker, std::vector<float> v, reduce_op op = reduce_op::sum, std::string name = "g/0") {
  return piece(worker, std::move(name), collective_kind::reduce, std::move(v), op);
}

std::vector<float> values(const kv_collective_reply& r) {
  if (r.data.empty()) return {};
  return {r.data.data<float>(), r.data.data<float>() + r.data.numel()};
}

struct rounds_fixture {
  rounds_fixture() { rounds.start({0, 1, 2}); }

  // Gives every piece, each under token = its worker + 1; none may be refused.
  void give_all(std::vector<kv_collective> pieces) {
    for (auto& p : pieces) {
      const auto t = p.worker + 1;
      auto f = rounds.give(t, std::move(p));
      BOOST_TEST(!f, (f ? to_string(*f) : ""));
    }
  }
  // The answers so far, by token.
  std::map<collective_rounds::token, collective_rounds::answer> answers() {
    std::map<collective_rounds::token, collective_rounds::answer> out;
    for (auto& a : rounds.take_answers()) out.emplace(a.t, a);
    return out;
  }

  collective_rounds rounds;
};

const kv_collective_reply& reply_of(const collective_rounds::answer& a) {
  BOOST_REQUIRE(std::holds_alternative<std::shared_ptr<const kv_collective_reply>>(a.result));
  return *std::get<std::shared_ptr<const kv_collective_reply>>(a.result);
}

const fault& fault_of(const collective_rounds::answer& a) {
  BOOST_REQUIRE(std::holds_alternative<fault>(a.result));
  return std::get<fault>(a.result);
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_sum_waits_for_every_member_and_answers_each_the_same_rank_ordered_sum, rounds_fixture) {
  // Chosen so that the order of the additions shows: (1e8 + 1) - 1e8 is 0 in float.
  give_all({reduce(2, {-1e8f, 1.f}), reduce(0, {1e8f, 2.f})});
  BOOST_TEST(answers().empty());
  BOOST_TEST(rounds.open_rounds() == 1u);
  give_all({reduce(1, {1.f, 3.f})});
  auto a = answers();
  BOOST_REQUIRE(a.size() == 3u);
  for (auto& [t, ans] : a) {
    const auto& r = reply_of(ans);
    BOOST_TEST(values(r) == (std::vector<float>{(1e8f + 1.f) + -1e8f, 6.f}));
    BOOST_TEST(r.ranks == (std::vector<std::uint32_t>{0, 1, 2}));
  }
  BOOST_TEST(rounds.open_rounds() == 0u);
}

BOOST_FIXTURE_TEST_CASE(average_divides_the_sum_and_max_min_and_product_combine_in_rank_order, rounds_fixture) {
  give_all({reduce(0, {1.f, -4.f}, reduce_op::avg), reduce(1, {2.f, 5.f}, reduce_op::avg),
            reduce(2, {6.f, 2.f}, reduce_op::avg)});
  for (auto& [t, ans] : answers()) BOOST_TEST(values(reply_of(ans)) == (std::vector<float>{3.f, 1.f}));
  give_all({reduce(0, {1.f, -4.f}, reduce_op::max, "m/0"), reduce(1, {2.f, -5.f}, reduce_op::max, "m/0"),
            reduce(2, {-6.f, -4.5f}, reduce_op::max, "m/0")});
  for (auto& [t, ans] : answers()) BOOST_TEST(values(reply_of(ans)) == (std::vector<float>{2.f, -4.f}));
  give_all({reduce(0, {1.f, -4.f}, reduce_op::min, "n/0"), reduce(1, {2.f, -5.f}, reduce_op::min, "n/0"),
            reduce(2, {-6.f, -4.5f}, reduce_op::min, "n/0")});
  for (auto& [t, ans] : answers()) BOOST_TEST(values(reply_of(ans)) == (std::vector<float>{-6.f, -5.f}));
  give_all({reduce(0, {1.f, -4.f}, reduce_op::product, "p/0"), reduce(1, {2.f, -5.f}, reduce_op::product, "p/0"),
            reduce(2, {-6.f, -4.5f}, reduce_op::product, "p/0")});
  for (auto& [t, ans] : answers()) BOOST_TEST(values(reply_of(ans)) == (std::vector<float>{-12.f, -90.f}));
}

BOOST_FIXTURE_TEST_CASE(a_broadcast_answers_everyone_with_the_roots_piece, rounds_fixture) {
  auto from = [](std::uint32_t w, std::vector<float> v) {
    auto c = piece(w, "b/0", collective_kind::broadcast, v);
    c.root = 1;
    c.dims = {3};
    return c;
  };
  give_all({from(0, {}), from(2, {}), from(1, {7.f, 8.f, 9.f})});
  auto a = answers();
  BOOST_REQUIRE(a.size() == 3u);
  for (auto& [t, ans] : a) BOOST_TEST(values(reply_of(ans)) == (std::vector<float>{7.f, 8.f, 9.f}));
}

BOOST_FIXTURE_TEST_CASE(an_allgather_concatenates_uneven_pieces_in_rank_order, rounds_fixture) {
  give_all({piece(2, "a/0", collective_kind::allgather, {5.f}), piece(0, "a/0", collective_kind::allgather, {1.f, 2.f}),
            piece(1, "a/0", collective_kind::allgather, {})});
  for (auto& [t, ans] : answers()) {
    const auto& r = reply_of(ans);
    BOOST_TEST(values(r) == (std::vector<float>{1.f, 2.f, 5.f}));
    BOOST_TEST(r.dims == (std::vector<std::vector<std::int64_t>>{{2}, {0}, {1}}));
  }
}

BOOST_FIXTURE_TEST_CASE(the_size_exchange_answers_every_members_shape, rounds_fixture) {
  auto shape_of = [](std::uint32_t w, std::vector<std::int64_t> dims) {
    kv_collective c;
    c.worker = w;
    c.name = "a/sizes";
    c.kind = collective_kind::sizes;
    c.dims = std::move(dims);
    return c;
  };
  give_all({shape_of(0, {2, 3}), shape_of(1, {0, 3}), shape_of(2, {5, 3})});
  for (auto& [t, ans] : answers())
    BOOST_TEST(reply_of(ans).dims == (std::vector<std::vector<std::int64_t>>{{2, 3}, {0, 3}, {5, 3}}));
}

BOOST_FIXTURE_TEST_CASE(a_member_lost_before_its_piece_fails_the_round_for_everyone_naming_it, rounds_fixture) {
  give_all({reduce(0, {1.f}), reduce(2, {1.f})});
  rounds.member_left(1);
  auto a = answers();
  BOOST_REQUIRE(a.size() == 2u);
  for (auto& [t, ans] : a) {
    BOOST_TEST((fault_of(ans).code == errc::member_lost));
    BOOST_TEST(has(fault_of(ans).detail, "member 1 left"), fault_of(ans).detail);
  }
  // Later rounds wait only for the members still live.
  give_all({reduce(0, {1.f}, reduce_op::sum, "next/0"), reduce(2, {2.f}, reduce_op::sum, "next/0")});
  for (auto& [t, ans] : answers()) BOOST_TEST(values(reply_of(ans)) == (std::vector<float>{3.f}));
}

BOOST_FIXTURE_TEST_CASE(a_member_lost_after_its_piece_leaves_the_round_whole, rounds_fixture) {
  give_all({reduce(0, {1.f}), reduce(1, {2.f})});
  rounds.member_left(1);
  BOOST_TEST(answers().empty());
  give_all({reduce(2, {4.f})});
  auto a = answers();
  BOOST_REQUIRE(a.size() == 3u);
  for (auto& [t, ans] : a) BOOST_TEST(values(reply_of(ans)) == (std::vector<float>{7.f}));
}

BOOST_FIXTURE_TEST_CASE(a_disagreeing_piece_fails_the_round_and_a_late_one_hears_why, rounds_fixture) {
  give_all({reduce(0, {1.f, 2.f})});
  auto f = rounds.give(2, reduce(1, {1.f, 2.f, 3.f}));
  BOOST_REQUIRE(f);
  BOOST_TEST((f->code == errc::bad_shape));
  BOOST_TEST(has(f->detail, "rank 1 asks for a allreduce (sum) of 3 elements but rank 0 for a allreduce (sum) of 2"),
             f->detail);
  auto a = answers();
  BOOST_REQUIRE(a.size() == 1u);
  BOOST_TEST(fault_of(a.at(1)).detail == f->detail);
  // Rank 2 comes late with a well-formed piece: it gets the same fault, not a new round.
  auto late = rounds.give(3, reduce(2, {1.f, 2.f}));
  BOOST_REQUIRE(late);
  BOOST_TEST(late->detail == f->detail);
  BOOST_TEST(rounds.open_rounds() == 0u);
  BOOST_TEST(rounds.remembered_failures() == 0u);  // everyone has been told
  // Another op or root disagrees too.
  give_all({reduce(0, {1.f}, reduce_op::sum, "x/0")});
  auto op = rounds.give(2, reduce(1, {1.f}, reduce_op::max, "x/0"));
  BOOST_TEST((op && op->code == errc::bad_shape));
}

BOOST_FIXTURE_TEST_CASE(duplicates_strangers_late_joiners_and_bad_pieces_are_refused_alone, rounds_fixture) {
  give_all({reduce(0, {1.f})});
  auto dup = rounds.give(9, reduce(0, {1.f}));
  BOOST_TEST((dup && dup->code == errc::duplicate));
  auto stranger = rounds.give(9, reduce(7, {1.f}));
  BOOST_TEST((stranger && stranger->code == errc::not_member));
  rounds.member_joined(3);
  auto late = rounds.give(9, reduce(3, {1.f}));
  BOOST_TEST((late && late->code == errc::not_member));
  BOOST_TEST(has(late->detail, "joined after collective \"g/0\" began"));
  auto cut = reduce(1, {1.f});
  cut.dims = {2};
  auto f = rounds.give(9, std::move(cut));
  BOOST_TEST((f && f->code == errc::bad_shape));
  auto halves = reduce(1, {1.f});
  halves.data = tensor(shape{1}, dtype::f16);
  auto d = rounds.give(9, std::move(halves));
  BOOST_TEST((d && d->code == errc::bad_dtype));
  auto unknown = reduce(1, {1.f});
  unknown.op = static_cast<reduce_op>(static_cast<int>(last_reduce_op) + 1);  // a newer build's, or garbage
  auto u = rounds.give(9, std::move(unknown));
  BOOST_TEST((u && u->code == errc::malformed));
  auto nameless = reduce(1, {1.f}, reduce_op::sum, "");
  BOOST_TEST(static_cast<bool>(rounds.give(9, std::move(nameless))));
  auto huge = reduce(1, {});
  huge.dims = {kv_max_message_floats + 1};
  BOOST_TEST(static_cast<bool>(rounds.give(9, std::move(huge))));
  auto root = piece(1, "b/0", collective_kind::broadcast, {});
  root.root = 7;
  auto r = rounds.give(9, std::move(root));
  BOOST_TEST((r && r->code == errc::member_lost));
  // None of these disturbed the open round: it closes with the rest.
  give_all({reduce(1, {2.f}), reduce(2, {3.f})});
  for (auto& [t, ans] : answers()) BOOST_TEST(values(reply_of(ans)) == (std::vector<float>{6.f}));
}

BOOST_AUTO_TEST_CASE(pieces_before_the_start_and_beyond_the_bound_are_refused) {
  collective_rounds rounds(2);
  auto early = rounds.give(1, reduce(0, {1.f}));
  BOOST_TEST((early && early->code == errc::not_started));
  rounds.start({0, 1});
  BOOST_TEST(!rounds.give(1, reduce(0, {1.f}, reduce_op::sum, "a/0")));
  BOOST_TEST(!rounds.give(2, reduce(0, {1.f}, reduce_op::sum, "a/1")));
  auto over = rounds.give(3, reduce(0, {1.f}, reduce_op::sum, "a/2"));
  BOOST_TEST((over && over->code == errc::bad_job));
  BOOST_TEST(has(over->detail, "2 collective pieces waiting"));
  BOOST_TEST(!rounds.give(4, reduce(1, {1.f}, reduce_op::sum, "a/0")));  // one closes: room again
  BOOST_TEST(!rounds.give(5, reduce(0, {1.f}, reduce_op::sum, "a/2")));
}

BOOST_AUTO_TEST_CASE(a_lone_member_gets_its_own_piece_back) {
  collective_rounds rounds;
  rounds.start({4});
  BOOST_TEST(!rounds.give(1, reduce(4, {1.5f, -2.f}, reduce_op::avg)));
  auto a = rounds.take_answers();
  BOOST_REQUIRE(a.size() == 1u);
  BOOST_TEST(values(reply_of(a[0])) == (std::vector<float>{1.5f, -2.f}));
}

BOOST_FIXTURE_TEST_CASE(a_piece_holding_nan_or_infinity_fails_the_reduction_on_every_member, rounds_fixture) {
  give_all({reduce(0, {1.f, 2.f})});
  auto nan = rounds.give(2, reduce(1, {std::nanf(""), 2.f}));
  BOOST_REQUIRE(nan);
  BOOST_TEST((nan->code == errc::not_finite));
  BOOST_TEST(has(nan->detail, "rank 1's piece holds NaN or infinity"), nan->detail);
  auto a = answers();
  BOOST_REQUIRE(a.size() == 1u);
  BOOST_TEST((fault_of(a.at(1)).code == errc::not_finite));
  auto late = rounds.give(3, reduce(2, {1.f, 2.f}));
  BOOST_TEST((late && late->code == errc::not_finite));
  // The first piece of a round may be the bad one: the others hear of it when they come.
  auto first = rounds.give(1, reduce(0, {INFINITY}, reduce_op::sum, "i/0"));
  BOOST_TEST((first && first->code == errc::not_finite));
  for (std::uint32_t w : {1u, 2u}) {
    auto f = rounds.give(w + 1, reduce(w, {1.f}, reduce_op::sum, "i/0"));
    BOOST_TEST((f && f->code == errc::not_finite));
  }
  BOOST_TEST(rounds.open_rounds() == 0u);
  BOOST_TEST(rounds.remembered_failures() == 0u);
  // Broadcasts and gathers carry values as they are.
  give_all({piece(0, "g/0", collective_kind::allgather, {std::nanf("")}), piece(1, "g/0", collective_kind::allgather, {}),
            piece(2, "g/0", collective_kind::allgather, {})});
  BOOST_TEST(answers().size() == 3u);
}
