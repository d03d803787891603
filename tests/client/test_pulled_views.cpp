// Tests for client/pulled_views.cpp (Note [2-bit key-value pulls]): a member asks for f32
// until it holds a copy of every part it pulls whole (a part pulled by rows never has
// one); a shard's 2-bit codes of several parts, each encoded on its own, land in the
// caller's arrays and leave the member's copies bitwise equal to the shard's views; codes
// that do not fit, or for a part the member holds no copy of, change nothing; a forgotten
// part asks for f32 again.
#define BOOST_TEST_MODULE pulled_views
#include <boost/test/unit_test.hpp>

#include <vector>

#include "client/pulled_views.hpp"
#include "core/pull_views.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using namespace troupe::kv;
using test::same_bits;

namespace {

const grad_codec two_bit{codec_kind::two_bit, 0.0f, true};
constexpr std::int64_t na = 1500, nb = 700;
const kv_part_id a = make_part_id(0, 0), b = make_part_id(1, 0);

// The shard's side of a pull of parts a and b by member 2: codes (or f32, when `full`)
// concatenated.
tensor shard_answer(pull_views& shard, const tensor& va, const tensor& vb, bool full) {
  tensor wa = shard.answer(2, tensor(va), full, a), wb = shard.answer(2, tensor(vb), full, b);
  tensor out = tensor::uninitialized({static_cast<std::int64_t>(wa.nbytes() + wb.nbytes()) /
                                          static_cast<std::int64_t>(size_of(wa.type()))},
                                     wa.type());
  std::copy(wa.bytes(), wa.bytes() + wa.nbytes(), out.bytes());
  std::copy(wb.bytes(), wb.bytes() + wb.nbytes(), out.bytes() + wa.nbytes());
  return out;
}

// A tensor holding v's floats.
tensor from(const std::vector<float>& v) {
  tensor t = tensor::uninitialized({static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(codes_of_several_parts_land_in_the_arrays_and_keep_both_copies_equal) {
  pull_views shard(two_bit);
  pulled_views member(two_bit);
  std::vector<float> out_a(na), out_b(nb);
  const std::vector<pull_part> parts{{a, out_a.data(), na, {}, 0}, {b, out_b.data(), nb, {}, 0}};
  tensor va = test::random_tensor({na}, 1), vb = test::random_tensor({nb}, 2);
  BOOST_TEST(member.needs_full(parts));
  tensor first = shard_answer(shard, va, vb, true);
  BOOST_TEST((first.type() == dtype::f32));
  member.take_values(parts, first);
  BOOST_TEST(!member.needs_full(parts));
  for (int step = 0; step < 6; ++step) {
    va = test::random_tensor({na}, 10 + step);
    vb = test::random_tensor({nb}, 20 + step);
    tensor codes = shard_answer(shard, va, vb, false);
    BOOST_TEST((codes.type() == dtype::u8));
    BOOST_REQUIRE(!member.apply_codes(parts, codes));
  }
  // The caller's arrays hold the member's copies, which are the shard's views to the bit.
  BOOST_TEST(same_bits(from(out_a), *shard.view(2, a)));
  BOOST_TEST(same_bits(from(out_b), *shard.view(2, b)));
}

BOOST_AUTO_TEST_CASE(codes_that_do_not_fit_change_nothing_and_a_forgotten_part_asks_for_f32) {
  pull_views shard(two_bit);
  pulled_views member(two_bit);
  std::vector<float> out_a(na, 7.f), out_b(nb, 7.f);
  const std::vector<pull_part> parts{{a, out_a.data(), na, {}, 0}, {b, out_b.data(), nb, {}, 0}};
  tensor va = test::random_tensor({na}, 3), vb = test::random_tensor({nb}, 4);
  // Codes for parts the member holds no copy of.
  shard.answer(2, tensor(va), true, a);
  shard.answer(2, tensor(vb), true, b);
  tensor codes = shard_answer(shard, va, vb, false);
  auto none = member.apply_codes(parts, codes);
  BOOST_REQUIRE(none.has_value());
  BOOST_TEST(none->find("holds no copy") != std::string::npos, *none);
  BOOST_TEST(out_a[0] == 7.f);
  // Codes one byte short.
  std::vector<float> values(na + nb);
  std::copy(va.data<float>(), va.data<float>() + na, values.begin());
  std::copy(vb.data<float>(), vb.data<float>() + nb, values.begin() + na);
  member.take_values(parts, from(values));
  tensor short_codes = tensor::uninitialized({static_cast<std::int64_t>(codes.nbytes()) - 1}, dtype::u8);
  auto wrong = member.apply_codes(parts, short_codes);
  BOOST_REQUIRE(wrong.has_value());
  BOOST_TEST(wrong->find("bytes for parts that take") != std::string::npos, *wrong);
  BOOST_TEST(out_a[0] == 7.f);
  // A part pulled by rows keeps no copy; a forgotten one asks for f32 again.
  BOOST_TEST(member.needs_full({{a, out_a.data(), 2, {0}, 2}}));
  BOOST_TEST(!member.needs_full(parts));
  member.forget({parts[1]});
  BOOST_TEST(member.needs_full(parts));
}
