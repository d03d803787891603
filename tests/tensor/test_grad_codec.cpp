// grad_codec: f16/bf16 conversions against hand-computed bit patterns and their round-trip
// bounds; 2-bit quantisation (fixed and adaptive) and its error-feedback residual against
// hand-computed values; a push with NaN or Inf left as f32; decoding into the caller's
// array; malformed wire tensors and codec names refused with the reason.
#define BOOST_TEST_MODULE grad_codec
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensor/grad_codec.hpp"

using namespace troupe;

namespace {

tensor of(std::vector<float> v) {
  tensor t({static_cast<std::int64_t>(v.size())});
  std::memcpy(t.bytes(), v.data(), v.size() * 4);
  return t;
}

std::vector<float> values(const tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// A one-block 2-bit wire tensor's magnitude (its first 4 bytes) and its code bytes (the rest).
float magnitude(const tensor& t) {
  float s = 0;
  std::memcpy(&s, t.bytes(), 4);
  return s;
}
std::vector<int> codes(const tensor& t) {
  std::vector<int> out;
  for (std::size_t i = 4; i < t.nbytes(); ++i) out.push_back(static_cast<int>(t.bytes()[i]));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(f16_and_bf16_bit_patterns) {
  BOOST_TEST(f32_to_f16(1.0f) == 0x3c00);
  BOOST_TEST(f32_to_f16(-2.0f) == 0xc000);
  BOOST_TEST(f32_to_f16(0.1f) == 0x2e66);
  BOOST_TEST(f32_to_f16(1.0f / 3) == 0x3555);
  BOOST_TEST(f32_to_f16(65504.0f) == 0x7bff);  // the largest half
  BOOST_TEST(f32_to_f16(65520.0f) == 0x7c00);  // rounds to infinity
  BOOST_TEST(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal
  BOOST_TEST(f32_to_f16(1e-8f) == 0x0000);
  BOOST_TEST(f32_to_f16(-0.0f) == 0x8000);
  BOOST_TEST(f32_to_f16(std::numeric_limits<float>::infinity()) == 0x7c00);
  BOOST_TEST(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  BOOST_TEST(f16_to_f32(0x3555) == 0.333251953125f);
  BOOST_TEST(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  BOOST_TEST(f16_to_f32(0x7bff) == 65504.0f);

  BOOST_TEST(f32_to_bf16(1.0f) == 0x3f80);
  BOOST_TEST(f32_to_bf16(0.1f) == 0x3dcd);  // 0x3dcccccd rounds up
  BOOST_TEST(f32_to_bf16(-3.0f) == 0xc040);
  BOOST_TEST(bf16_to_f32(0x3dcd) == 0.10009765625f);
  BOOST_TEST(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

BOOST_AUTO_TEST_CASE(f16_and_bf16_round_trips_stay_within_half_an_ulp) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  std::vector<float> v(4096);
  for (auto& x : v) x = u(rng);
  const tensor x = of(v);
  for (auto kind : {codec_kind::fp16, codec_kind::bf16}) {
    const grad_codec c{kind};
    const tensor wire = encode(c, x);
    BOOST_TEST(wire.nbytes() == x.nbytes() / 2);
    auto back = decode(c, wire, x.numel());
    BOOST_REQUIRE(back.has_value());
    const float bound = kind == codec_kind::fp16 ? std::ldexp(1.0f, -11) : std::ldexp(1.0f, -8);
    float worst = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      worst = std::max(worst, std::abs(back->data<float>()[i] - v[i]) / std::abs(v[i]));
    BOOST_TEST(worst <= bound, to_string(c) << " relative error " << worst);
    BOOST_TEST(worst > 0.0f);  // it did round
  }
}

BOOST_AUTO_TEST_CASE(fixed_two_bit_quantises_and_keeps_the_residual) {
  const grad_codec c{codec_kind::two_bit, 0.5f};
  tensor residual({5});
  // Step 1: 0.6 >= t, -0.7 <= -t, the rest below t.
  tensor wire = encode(c, of({0.6f, -0.7f, 0.2f, 0.0f, 0.3f}), residual);
  BOOST_TEST((wire.type() == dtype::u8));
  BOOST_TEST(magnitude(wire) == 0.5f);
  BOOST_TEST((codes(wire) == std::vector<int>{0x09, 0x00}));  // codes 1, 2, 0, 0 | 0
  std::vector<float> r = values(residual);
  BOOST_TEST(r[0] == 0.6f - 0.5f);
  BOOST_TEST(r[1] == -0.7f + 0.5f);
  BOOST_TEST(r[2] == 0.2f);
  BOOST_TEST(r[3] == 0.0f);
  BOOST_TEST(r[4] == 0.3f);
  auto sent = decode(c, wire, 5);
  BOOST_REQUIRE(sent.has_value());
  BOOST_TEST((values(*sent) == std::vector<float>{0.5f, -0.5f, 0.0f, 0.0f, 0.0f}));

  // Step 2: the residual carries 0.2 and 0.3 over the threshold.
  wire = encode(c, of({0.0f, 0.0f, 0.35f, 0.0f, 0.25f}), residual);
  BOOST_TEST((codes(wire) == std::vector<int>{0x10, 0x01}));  // codes 0, 0, 1, 0 | 1
  r = values(residual);
  BOOST_TEST(r[0] == 0.6f - 0.5f);
  BOOST_TEST(r[2] == (0.2f + 0.35f) - 0.5f);
  BOOST_TEST(r[4] == (0.3f + 0.25f) - 0.5f);
  sent = decode(c, wire, 5);
  BOOST_REQUIRE(sent.has_value());
  BOOST_TEST((values(*sent) == std::vector<float>{0.0f, 0.0f, 0.5f, 0.0f, 0.5f}));

  // A 4-byte magnitude per block of 1024 elements, then 1/16 of the f32 bytes (rounded up
  // to whole bytes).
  BOOST_TEST(encoded_bytes(c, 1000) == 254);
  BOOST_TEST(encoded_bytes(c, 1001) == 255);
  BOOST_TEST(encoded_bytes(c, 1024) == 260);
  BOOST_TEST(encoded_bytes(c, 1025) == 8 + 257);
  BOOST_TEST(encoded_bytes(c, 0) == 0);
}

BOOST_AUTO_TEST_CASE(adaptive_two_bit_sends_the_big_elements_at_their_mean_size) {
  const grad_codec c = *parse_grad_codec("2bit");
  BOOST_TEST(c.adaptive);
  tensor residual({5});
  // mean |v| = 1.8 / 5 = 0.36: 0.6 and -0.7 are at or above it, and their mean size is 0.65.
  tensor wire = encode(c, of({0.6f, -0.7f, 0.2f, 0.0f, 0.3f}), residual);
  BOOST_TEST(magnitude(wire) == 0.65f);
  BOOST_TEST((codes(wire) == std::vector<int>{0x09, 0x00}));
  std::vector<float> r = values(residual);
  BOOST_TEST(r[0] == 0.6f - 0.65f);
  BOOST_TEST(r[1] == -0.7f + 0.65f);
  BOOST_TEST(r[2] == 0.2f);
  BOOST_TEST(r[4] == 0.3f);
  auto sent = decode(c, wire, 5);
  BOOST_REQUIRE(sent.has_value());
  BOOST_TEST((values(*sent) == std::vector<float>{0.65f, -0.65f, 0.0f, 0.0f, 0.0f}));

  // A zero gradient with a zero residual sends nothing, at magnitude 0.
  tensor none({3});
  wire = encode(c, of({0.0f, 0.0f, 0.0f}), none);
  BOOST_TEST(magnitude(wire) == 0.0f);
  BOOST_TEST((codes(wire) == std::vector<int>{0x00}));
}

BOOST_AUTO_TEST_CASE(adaptive_two_bit_takes_its_levels_per_block_of_1024_elements) {
  // Three blocks: large values, values a thousand times smaller, and a 5-element tail.
  // One level for all of them would send the small block at the large block's size.
  const grad_codec c = *parse_grad_codec("2bit");
  const std::int64_t n = 2 * two_bit_block + 5;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const float sign = i % 2 ? -1.0f : 1.0f;
    const float size = i < two_bit_block ? (i % 4 < 2 ? 2.0f : 1.0f) : i < 2 * two_bit_block ? 0.002f : 0.5f;
    v[static_cast<std::size_t>(i)] = sign * size;
  }
  v[static_cast<std::size_t>(n - 1)] = 0.0f;  // the tail: 0.5 four times and a 0
  tensor residual({n});
  const tensor wire = encode(c, of(v), residual);
  BOOST_TEST(wire.nbytes() == static_cast<std::size_t>(3 * 4 + (n + 3) / 4));
  float s[3];
  std::memcpy(s, wire.bytes(), sizeof s);
  // Block 0: mean |v| 1.5, so the 2s are sent at 2 and the 1s wait; block 1: every
  // element at 0.002; the tail: mean 0.4, the four 0.5s at 0.5.
  BOOST_TEST(s[0] == 2.0f);
  BOOST_TEST(s[1] == 0.002f);
  BOOST_TEST(s[2] == 0.5f);
  auto sent = decode(c, wire, n);
  BOOST_REQUIRE(sent.has_value());
  const std::vector<float> got = values(*sent), left = values(residual);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const float want = i < two_bit_block && i % 4 >= 2 ? 0.0f : v[k];
    BOOST_TEST(got[k] == want, "element " << i);
    BOOST_TEST(left[k] == v[k] - want, "element " << i);
  }
  // A bad magnitude in a later block is refused by name.
  tensor bad = wire;
  const float negative = -1.0f;
  std::memcpy(bad.bytes() + 4, &negative, 4);
  auto r = decode(c, bad, n);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("in block 1") != std::string::npos, r.error().message);
}

BOOST_AUTO_TEST_CASE(a_push_with_nan_or_inf_goes_as_f32_and_leaves_the_residual_alone) {
  const grad_codec two_bit{codec_kind::two_bit, 0.0f, true};
  tensor residual = of({0.25f, 0.f, 0.f, -0.25f});
  tensor ok = encode_for_push(two_bit, of({1.f, 0.f, 0.f, 2.f}), residual);
  BOOST_TEST((ok.type() == dtype::u8));  // a finite gradient is encoded, and the residual moves
  BOOST_TEST(values(residual) != std::vector<float>({0.25f, 0.f, 0.f, -0.25f}));
  const std::vector<float> kept = values(residual);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    tensor g = of({1.f, bad, 0.f, 1.f});
    const std::byte* at = g.bytes();
    tensor wire = encode_for_push(two_bit, std::move(g), residual);
    BOOST_TEST((wire.type() == dtype::f32));
    BOOST_TEST(wire.bytes() == at);  // the gradient itself, for the shard to refuse
    BOOST_TEST(values(residual) == kept);
  }
  tensor half = encode_for_push(grad_codec{codec_kind::fp16}, of({1.f, 2.f}), {});
  BOOST_TEST((half.type() == dtype::f16));
  tensor plain = of({1.f, 2.f});
  const std::byte* at = plain.bytes();
  BOOST_TEST(encode_for_push(grad_codec{}, std::move(plain), {}).bytes() == at);
}

BOOST_AUTO_TEST_CASE(malformed_wire_tensors_are_refused) {
  const grad_codec two{codec_kind::two_bit, 0.5f};
  tensor bad({6}, dtype::u8);
  bad.bytes()[4] = std::byte{0x03};  // code 3
  auto r = decode(two, bad, 5);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("invalid code 3 at element 0") != std::string::npos, r.error().message);
  tensor padded({6}, dtype::u8);
  padded.bytes()[5] = std::byte{0x04};  // element 5 of a 5-element tensor
  r = decode(two, padded, 5);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("past its last element") != std::string::npos, r.error().message);
  tensor nan_magnitude({6}, dtype::u8);
  const float nan = std::nanf("");
  std::memcpy(nan_magnitude.bytes(), &nan, 4);
  r = decode(two, nan_magnitude, 5);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("magnitude") != std::string::npos, r.error().message);
  BOOST_TEST(!decode(two, tensor({3}, dtype::u8), 5).has_value());           // wrong size
  BOOST_TEST(!decode(two, tensor({5}, dtype::f16), 4).has_value());          // wrong dtype
  BOOST_TEST(!decode(grad_codec{codec_kind::fp16}, tensor({4}), 4).has_value());  // f32 where f16 belongs
  BOOST_TEST(!decode(grad_codec{}, tensor({4}, dtype::f16), 4).has_value());
  BOOST_TEST(decode(grad_codec{}, tensor({4}), 4).has_value());
}

tensor_view view_of(std::vector<float>& v) {
  return tensor_view(reinterpret_cast<std::byte*>(v.data()), dtype::f32, {static_cast<std::int64_t>(v.size())});
}

BOOST_AUTO_TEST_CASE(decode_into_writes_the_callers_array_and_nothing_when_refused) {
  const grad_codec bf16{codec_kind::bf16};
  const tensor x = of({1.5f, -2.0f, 0.25f, 3.0f});
  const tensor wire = encode(bf16, x);
  std::vector<float> out(4, 9.f);
  BOOST_TEST(!decode_into(bf16, wire, view_of(out)).has_value());
  BOOST_TEST(out == (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f}), boost::test_tools::per_element());
  // A wire of the wrong size or dtype is refused before anything is written.
  std::vector<float> kept(3, 9.f);
  auto e = decode_into(bf16, wire, view_of(kept));
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->find("wrong size") != std::string::npos, *e);
  e = decode_into(grad_codec{codec_kind::fp16}, wire, view_of(out));
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->find("wrong dtype") != std::string::npos, *e);
  BOOST_TEST(kept == (std::vector<float>(3, 9.f)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(codec_names_parse_and_print_back) {
  for (const char* name : {"none", "fp16", "bf16", "2bit", "2bit:0.5", "2bit:0.25"}) {
    auto c = parse_grad_codec(name);
    BOOST_REQUIRE(c.has_value());
    BOOST_TEST(to_string(*c) == name);
  }
  auto fixed = parse_grad_codec("2bit:0.5");
  BOOST_REQUIRE(fixed.has_value());
  BOOST_TEST(!fixed->adaptive);
  BOOST_TEST(fixed->threshold == 0.5f);
  for (const char* bad : {"fp8", "2bit:", "2bit:-1", "2bit:abc", "2bit:inf", ""}) {
    auto c = parse_grad_codec(bad);
    BOOST_TEST(!c.has_value(), bad);
    if (!c) BOOST_TEST(c.error().message.find("--compression") != std::string::npos);
  }
}
