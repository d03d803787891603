// Tests for core/ring_collective.cpp: all-reduce, broadcast and all-gather over rings of
// 1-8 ranks whose pieces are delivered in random orders (seeded), against the results
// computed directly; bitwise the same on every rank and in every order; and every bad
// piece refused by name without touching the buffer.
#define BOOST_TEST_MODULE ring_collective
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/ring_collective.hpp"

using namespace troupe;

namespace {

std::vector<tensor> random_inputs(std::uint32_t world, std::int64_t numel, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<tensor> out;
  for (std::uint32_t r = 0; r < world; ++r) {
    tensor t({numel});
    for (std::int64_t i = 0; i < numel; ++i) t.data<float>()[i] = dist(gen);
    out.push_back(std::move(t));
  }
  return out;
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

ring_spec spec_of(std::uint32_t world, std::uint32_t rank, std::int64_t piece) {
  ring_spec s;
  s.world = world;
  s.rank = rank;
  s.collective = 7;
  s.piece_elems = piece;
  return s;
}

// Runs every rank's collective, delivering the pieces in flight in a random order (any
// link, any piece on it). Returns the elements each rank sent; fails the test on a refusal.
std::vector<std::int64_t> run_ring(std::vector<ring_collective>& ranks, std::uint32_t order_seed) {
  const std::size_t n = ranks.size();
  std::vector<std::vector<ring_piece>> to(n);  // pieces in flight to rank r
  std::vector<std::int64_t> sent(n, 0);
  auto post = [&](std::size_t from, std::vector<ring_piece> pieces) {
    for (auto& p : pieces) {
      sent[from] += p.values.numel();
      to[(from + 1) % n].push_back(std::move(p));
    }
  };
  for (std::size_t r = 0; r < n; ++r) post(r, ranks[r].start());
  std::mt19937 gen(order_seed);
  bool refused = false;
  for (;;) {
    std::vector<std::size_t> busy;
    for (std::size_t r = 0; r < n; ++r)
      if (!to[r].empty()) busy.push_back(r);
    if (busy.empty()) break;
    const std::size_t r = busy[gen() % busy.size()];
    const std::size_t k = gen() % to[r].size();
    ring_piece p = std::move(to[r][k]);
    to[r].erase(to[r].begin() + static_cast<std::ptrdiff_t>(k));
    auto out = ranks[r].receive(p);
    if (out.refused) {
      refused = true;
      BOOST_TEST_MESSAGE("refused: " << to_string(*out.refused));
    }
    post(r, std::move(out.send));
  }
  BOOST_TEST(!refused);
  for (const auto& c : ranks) BOOST_TEST(c.done());
  return sent;
}

// Chunk c of n over numel elements, as Note [The ring] cuts it.
std::pair<std::int64_t, std::int64_t> chunk_of(std::int64_t numel, std::uint32_t n, std::uint32_t c) {
  std::int64_t lo = 0;
  for (std::uint32_t i = 0; i < c; ++i) lo += numel / n + (i < numel % n ? 1 : 0);
  return {lo, lo + numel / n + (c < numel % n ? 1 : 0)};
}

// The all-reduce computed directly, in the ring's order for each chunk: c, c + 1, ..., c - 1.
tensor reduced_directly(const std::vector<tensor>& in, reduce_op op) {
  const std::uint32_t n = static_cast<std::uint32_t>(in.size());
  const std::int64_t numel = in[0].numel();
  tensor out({numel});
  for (std::uint32_t c = 0; c < n; ++c) {
    const auto [lo, hi] = chunk_of(numel, n, c);
    for (std::int64_t i = lo; i < hi; ++i) {
      float acc = in[c].data<float>()[i];
      for (std::uint32_t k = 1; k < n; ++k) {
        const float x = in[(c + k) % n].data<float>()[i];
        acc = op == reduce_op::max       ? ((acc > x || std::isnan(acc)) ? acc : x)
              : op == reduce_op::min     ? ((acc < x || std::isnan(acc)) ? acc : x)
              : op == reduce_op::product ? acc * x
                                         : acc + x;
      }
      out.data<float>()[i] = op == reduce_op::avg ? acc / static_cast<float>(n) : acc;
    }
  }
  return out;
}

std::vector<tensor> all_reduce_in_ring(const std::vector<tensor>& inputs, reduce_op op, std::int64_t piece,
                                       std::uint32_t order_seed, std::vector<std::int64_t>* sent = nullptr,
                                       const ring_collective::piece_buffers& buffers = {}) {
  std::vector<tensor> bufs = inputs;
  std::vector<ring_collective> ranks;
  const std::uint32_t n = static_cast<std::uint32_t>(inputs.size());
  for (std::uint32_t r = 0; r < n; ++r) {
    ranks.push_back(*ring_collective::all_reduce(spec_of(n, r, piece), bufs[r], op));
    if (buffers) ranks.back().set_piece_buffers(buffers);
  }
  const auto s = run_ring(ranks, order_seed);
  if (sent) *sent = s;
  return bufs;
}

}  // namespace

BOOST_AUTO_TEST_CASE(all_reduce_sums_bitwise_alike_on_every_rank_for_1_to_8_ranks_and_any_size) {
  struct shape_case {
    std::int64_t numel, piece;
  };
  const std::vector<shape_case> cases = {{0, 4},    {1, 1},    {5, 1},       {7, 3},         {8, 2},
                                         {9, 4},    {1000, 7}, {1000, 4096}, {750'000, 65536}, {750'001, 10007}};
  for (std::uint32_t n = 1; n <= 8; ++n) {
    for (const auto& sc : cases) {
      if (sc.numel >= 750'000 && n % 3 != 2) continue;  // the megabytes on 2, 5 and 8 ranks
      BOOST_TEST_CONTEXT("ranks " << n << ", " << sc.numel << " floats in pieces of " << sc.piece) {
        const auto in = random_inputs(n, sc.numel, 100 * n + static_cast<std::uint32_t>(sc.numel % 97));
        const tensor want = reduced_directly(in, reduce_op::sum);
        const auto once = all_reduce_in_ring(in, reduce_op::sum, sc.piece, 1);
        const auto again = all_reduce_in_ring(in, reduce_op::sum, sc.piece, 2);
        for (std::uint32_t r = 0; r < n; ++r) {
          BOOST_TEST(same_bits(once[r], want));
          BOOST_TEST(same_bits(again[r], want));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(pieces_computed_into_given_buffers_give_the_same_bits) {
  // A mailbox that is sometimes full: every third call gets no buffer, so the piece that
  // came is passed on instead. The buffers are poisoned first: every value must be written.
  int calls = 0;
  std::int64_t lent = 0;
  const ring_collective::piece_buffers buffers = [&](std::int64_t numel) {
    if (++calls % 3 == 0) return tensor{};
    tensor t({numel});
    for (std::int64_t i = 0; i < numel; ++i) t.data<float>()[i] = std::nanf("");
    lent += numel;
    return t;
  };
  for (std::uint32_t n : {2u, 3u, 5u}) {
    for (reduce_op op : {reduce_op::sum, reduce_op::avg, reduce_op::max}) {
      BOOST_TEST_CONTEXT("ranks " << n << ", " << name_of(op)) {
        const auto in = random_inputs(n, 1001, 7 * n);
        const auto plain = all_reduce_in_ring(in, op, 37, 4);
        const auto given = all_reduce_in_ring(in, op, 37, 5, nullptr, buffers);
        for (std::uint32_t r = 0; r < n; ++r) BOOST_TEST(same_bits(given[r], plain[r]));
      }
    }
  }
  BOOST_TEST(lent > 0);
}

BOOST_AUTO_TEST_CASE(the_direct_reference_is_the_sum_within_float_rounding) {
  const auto in = random_inputs(6, 4000, 11);
  const tensor got = all_reduce_in_ring(in, reduce_op::sum, 333, 3)[4];
  double worst = 0;
  for (std::int64_t i = 0; i < 4000; ++i) {
    double exact = 0;
    for (const auto& t : in) exact += t.data<float>()[i];
    worst = std::max(worst, std::abs(exact - got.data<float>()[i]));
  }
  BOOST_TEST(worst < 1e-4);
}

BOOST_AUTO_TEST_CASE(avg_divides_once_at_the_owner_and_max_keeps_nan) {
  for (std::uint32_t n : {2u, 3u, 5u}) {
    auto in = random_inputs(n, 101, n);
    const tensor want_avg = reduced_directly(in, reduce_op::avg);
    for (const auto& t : all_reduce_in_ring(in, reduce_op::avg, 8, 4)) BOOST_TEST(same_bits(t, want_avg));
    in[n - 1].data<float>()[50] = std::numeric_limits<float>::quiet_NaN();
    const tensor want_max = reduced_directly(in, reduce_op::max);
    BOOST_TEST(std::isnan(want_max.data<float>()[50]));
    for (const auto& t : all_reduce_in_ring(in, reduce_op::max, 8, 5)) {
      BOOST_TEST(same_bits(t, want_max));
      BOOST_TEST(std::isnan(t.data<float>()[50]));
    }
  }
}

BOOST_AUTO_TEST_CASE(min_and_product_end_as_reduced_directly_and_min_keeps_nan) {
  for (std::uint32_t n : {2u, 3u, 5u}) {
    auto in = random_inputs(n, 101, 3 * n);
    const tensor want_product = reduced_directly(in, reduce_op::product);
    for (const auto& t : all_reduce_in_ring(in, reduce_op::product, 8, 4)) BOOST_TEST(same_bits(t, want_product));
    in[0].data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
    const tensor want_min = reduced_directly(in, reduce_op::min);
    BOOST_TEST(std::isnan(want_min.data<float>()[7]));
    BOOST_TEST(!std::isnan(want_min.data<float>()[8]));
    for (const auto& t : all_reduce_in_ring(in, reduce_op::min, 8, 5)) BOOST_TEST(same_bits(t, want_min));
  }
  BOOST_TEST((parse_reduce_op("product").value() == reduce_op::product));
  BOOST_TEST(name_of(reduce_op::min) == "min");
}

BOOST_AUTO_TEST_CASE(each_rank_sends_twice_the_tensor_but_two_chunks) {
  // 2 (n - 1) / n of the tensor when the chunks are even: it forwards every chunk but the
  // one it owns, and gathers on every chunk but the one whose all-gather ends at it.
  for (std::uint32_t n : {2u, 4u, 8u}) {
    std::vector<std::int64_t> sent;
    all_reduce_in_ring(random_inputs(n, 64 * n, 9), reduce_op::sum, 16, 6, &sent);
    for (std::uint32_t r = 0; r < n; ++r) BOOST_TEST(sent[r] == 2 * 64 * (n - 1));
  }
}

BOOST_AUTO_TEST_CASE(broadcast_gives_every_rank_the_roots_tensor) {
  for (std::uint32_t n = 1; n <= 8; ++n) {
    for (std::uint32_t root = 0; root < n; root += 3) {
      auto bufs = random_inputs(n, 1234, 50 + n);
      const tensor want = bufs[root];
      std::vector<ring_collective> ranks;
      for (std::uint32_t r = 0; r < n; ++r)
        ranks.push_back(*ring_collective::broadcast(spec_of(n, r, 100), bufs[r], root));
      run_ring(ranks, n + root);
      for (const auto& t : bufs) BOOST_TEST(same_bits(t, want));
    }
  }
}

BOOST_AUTO_TEST_CASE(all_gather_concatenates_blocks_of_any_size_in_rank_order) {
  const std::vector<std::int64_t> counts = {3, 0, 17, 1, 40, 0, 5};
  const std::uint32_t n = static_cast<std::uint32_t>(counts.size());
  std::int64_t total = 0;
  for (auto c : counts) total += c;
  std::vector<tensor> mine;
  for (std::uint32_t r = 0; r < n; ++r) mine.push_back(random_inputs(1, counts[r], 70 + r)[0]);
  std::vector<tensor> outs(n, tensor({total}));
  std::vector<ring_collective> ranks;
  for (std::uint32_t r = 0; r < n; ++r)
    ranks.push_back(*ring_collective::all_gather(spec_of(n, r, 4), mine[r], outs[r], counts));
  run_ring(ranks, 8);
  tensor want({total});
  std::int64_t at = 0;
  for (std::uint32_t r = 0; r < n; ++r) {
    if (counts[r] > 0) copy(want.view().flat(at, counts[r]), mine[r]);
    at += counts[r];
  }
  for (const auto& t : outs) BOOST_TEST(same_bits(t, want));
}

BOOST_AUTO_TEST_CASE(a_rank_is_done_only_once_started_and_every_piece_it_expects_arrived) {
  tensor a({10}), b({10});
  auto r0 = *ring_collective::all_reduce(spec_of(2, 0, 5), a, reduce_op::sum);
  auto r1 = *ring_collective::all_reduce(spec_of(2, 1, 5), b, reduce_op::sum);
  BOOST_TEST(r0.pieces_missing() == 2);  // chunk 1's reduce-scatter, chunk 0's all-gather
  BOOST_TEST(!r0.done());
  auto from0 = r0.start();
  BOOST_TEST(from0.size() == 1u);
  auto o = r1.receive(from0[0]);  // before rank 1 started: allowed; it reduces and answers
  BOOST_TEST(!o.refused);
  BOOST_TEST(!r1.done());
  BOOST_TEST(!r1.scattered());  // not started
  auto from1 = r1.start();
  BOOST_TEST(r1.scattered());  // its one reduce-scatter piece came before it started
  BOOST_TEST(!r1.done());
  BOOST_TEST(!r0.scattered());
  for (auto& p : o.send) from1.push_back(std::move(p));
  BOOST_TEST(!r0.receive(from1[0]).refused);  // rank 1's own chunk: rank 0's reduce-scatter ends
  BOOST_TEST(r0.scattered());
  BOOST_TEST(!r0.done());
  for (std::size_t i = 1; i < from1.size(); ++i) BOOST_TEST(!r0.receive(from1[i]).refused);
  BOOST_TEST(r0.done());
  tensor lone({3});
  auto one = *ring_collective::all_reduce(spec_of(1, 0, 5), lone, reduce_op::avg);
  BOOST_TEST(!one.done());
  BOOST_TEST(one.start().empty());
  BOOST_TEST(one.done());
}

BOOST_AUTO_TEST_CASE(bad_pieces_are_refused_by_name_and_change_nothing) {
  // Rank 1 of 3, 9 floats: chunks [0,3) [3,6) [6,9); pieces of 2.
  tensor mine({9});
  for (int i = 0; i < 9; ++i) mine.data<float>()[i] = static_cast<float>(i);
  const tensor before = mine;
  auto rank1 = *ring_collective::all_reduce(spec_of(3, 1, 2), mine, reduce_op::sum);
  auto piece = [](std::uint64_t coll, ring_phase ph, std::uint32_t chunk, std::int64_t off, std::int64_t n,
                  dtype t = dtype::f32) {
    ring_piece p;
    p.collective = coll;
    p.phase = ph;
    p.chunk = chunk;
    p.offset = off;
    p.values = tensor({n}, t);
    return p;
  };
  struct bad {
    ring_piece p;
    errc code;
    const char* says;
  };
  const auto rs = ring_phase::reduce_scatter, ag = ring_phase::all_gather;
  std::vector<bad> cases;
  cases.push_back({piece(8, rs, 0, 0, 2), errc::bad_clock, "belongs to collective 8, not 7"});
  cases.push_back({piece(7, static_cast<ring_phase>(5), 0, 0, 2), errc::malformed, "unknown phase"});
  cases.push_back({piece(7, rs, 3, 0, 2), errc::malformed, "names chunk 3 of 3"});
  cases.push_back({piece(7, rs, 1, 3, 2), errc::malformed, "never receives there"});  // it starts chunk 1
  cases.push_back({piece(7, ag, 2, 6, 2), errc::malformed, "never receives there"});  // it owns chunk 2
  cases.push_back({piece(7, rs, 0, 0, 2, dtype::i32), errc::bad_dtype, "holds i32"});
  cases.push_back({piece(7, rs, 0, 1, 2), errc::bad_shape, "not a piece of chunk 0 [0, 3)"});
  cases.push_back({piece(7, rs, 0, 0, 3), errc::bad_shape, "not a piece of chunk 0"});
  cases.push_back({piece(7, rs, 0, 2, 2), errc::bad_shape, "not a piece of chunk 0"});  // the last piece holds 1
  cases.push_back({piece(7, rs, 0, 6, 2), errc::bad_shape, "not a piece of chunk 0"});
  ring_piece no_values = piece(7, rs, 0, 2, 1);
  no_values.values = tensor();  // the one-element tail piece, sent without its element
  cases.push_back({no_values, errc::bad_shape, "holds [2, +0), which is not a piece of chunk 0"});
  cases.push_back({piece(7, ag, 0, 0, 2), errc::malformed, "before this rank's values went into it"});
  cases.push_back({piece(7, ag, 1, 3, 2), errc::malformed, "before this rank's values went into it"});  // not started
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.says) {
      const auto out = rank1.receive(c.p);
      BOOST_TEST_REQUIRE(out.refused.has_value());
      BOOST_TEST(static_cast<int>(out.refused->code) == static_cast<int>(c.code));
      BOOST_TEST(out.refused->detail.find(c.says) != std::string::npos, out.refused->detail);
      BOOST_TEST(out.send.empty());
      BOOST_TEST(same_bits(mine, before));
      BOOST_TEST(rank1.pieces_missing() == 8);
    }
  }
  // A good piece is taken once; its copy is refused. Passing through (chunk 0 goes on to
  // rank 2, its owner), it carries the running sum on; this rank's own values stay as
  // they are until the all-gather brings the result.
  ring_piece good = piece(7, rs, 0, 0, 2);
  good.values.data<float>()[0] = 10.f;
  good.values.data<float>()[1] = 20.f;
  const auto taken = rank1.receive(good);
  BOOST_TEST(!taken.refused);
  BOOST_TEST_REQUIRE(taken.send.size() == 1u);
  BOOST_TEST(taken.send[0].values.data<float>()[0] == 10.f + 0.f);
  BOOST_TEST(taken.send[0].values.data<float>()[1] == 20.f + 1.f);
  BOOST_TEST(same_bits(mine, before));
  const auto again = rank1.receive(good);
  BOOST_TEST_REQUIRE(again.refused.has_value());
  BOOST_TEST(static_cast<int>(again.refused->code) == static_cast<int>(errc::duplicate));
  BOOST_TEST(same_bits(mine, before));
}

BOOST_AUTO_TEST_CASE(bad_calls_are_refused_with_what_is_wrong) {
  tensor t({4}), ints({4}, dtype::i32);
  auto message = [](const auto& e) { return e ? std::string() : e.error().message; };
  BOOST_TEST(message(ring_collective::all_reduce(spec_of(0, 0, 1), t, reduce_op::sum)).find("at least one rank") !=
             std::string::npos);
  BOOST_TEST(message(ring_collective::all_reduce(spec_of(2, 2, 1), t, reduce_op::sum)).find("rank 2 is not") !=
             std::string::npos);
  BOOST_TEST(message(ring_collective::all_reduce(spec_of(2, 0, 0), t, reduce_op::sum)).find("piece size") !=
             std::string::npos);
  BOOST_TEST(message(ring_collective::all_reduce(spec_of(2, 0, 1), ints, reduce_op::sum)).find("f32") !=
             std::string::npos);
  BOOST_TEST(message(ring_collective::broadcast(spec_of(2, 0, 1), t, 2)).find("root 2") != std::string::npos);
  tensor block({2}), out({4});
  BOOST_TEST(message(ring_collective::all_gather(spec_of(2, 0, 1), block, out, {2})).find("1 counts") !=
             std::string::npos);
  BOOST_TEST(message(ring_collective::all_gather(spec_of(2, 0, 1), block, out, {2, -1})).find("negative") !=
             std::string::npos);
  BOOST_TEST(message(ring_collective::all_gather(spec_of(2, 0, 1), block, out, {2, 1})).find("sum to 3") !=
             std::string::npos);
  BOOST_TEST(message(ring_collective::all_gather(spec_of(2, 0, 1), block, out, {3, 1})).find("its count says 3") !=
             std::string::npos);
  BOOST_TEST(message(parse_reduce_op("mean")).find("use sum, avg, max, min or product") != std::string::npos);
  BOOST_TEST(name_of(*parse_reduce_op("avg")) == "avg");
}
