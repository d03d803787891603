// Tests for client/push_compressor.cpp (Note [Compressed key-value pushes]): a push's
// parts are encoded one by one and concatenated, as the codec encodes each alone; with
// 2-bit each part keeps its own residual, so what one push leaves out of a key goes
// with that key's next push and never with another key's.
#define BOOST_TEST_MODULE push_compressor
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <vector>

#include "client/push_compressor.hpp"

using namespace troupe;
using namespace troupe::kv;

namespace {

std::vector<float> values(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * static_cast<float>((i % 7) - 3);
  return v;
}

push_part part(kv_part_id id, const std::vector<float>& v) {
  push_part p;
  p.part = id;
  p.data = v.data();
  p.numel = static_cast<std::int64_t>(v.size());
  return p;
}

bool same_bytes(const tensor& a, const std::byte* b, std::size_t n) {
  return a.nbytes() >= n && std::memcmp(a.bytes(), b, n) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(half_precision_parts_are_encoded_one_by_one_and_concatenated) {
  for (const codec_kind kind : {codec_kind::fp16, codec_kind::bf16}) {
    const grad_codec c{kind};
    push_compressor pc(c);
    const auto a = values(5, 0.25f), b = values(3, -1.5f);
    const tensor out = pc.encode_parts({part(1, a), part(2, b)});
    BOOST_TEST((out.type() == (kind == codec_kind::fp16 ? dtype::f16 : dtype::bf16)));
    BOOST_REQUIRE(out.numel() == 8);
    const tensor wa = encode(c, floats(a.data(), 5)), wb = encode(c, floats(b.data(), 3));
    BOOST_TEST(same_bytes(out, wa.bytes(), wa.nbytes()));
    BOOST_TEST(std::memcmp(out.bytes() + wa.nbytes(), wb.bytes(), wb.nbytes()) == 0);
  }
}

BOOST_AUTO_TEST_CASE(two_bit_parts_keep_their_own_residuals) {
  const grad_codec c{codec_kind::two_bit, 0.5f};
  push_compressor pc(c);
  const auto a = values(10, 0.2f), b = values(6, 0.3f);
  // The same pushes by hand, each part with a residual of its own.
  tensor ra({10}), rb({6});
  for (int round = 0; round < 3; ++round) {
    BOOST_TEST_CONTEXT("push " << round) {
      const tensor out = pc.encode_parts({part(1, a), part(2, b)});
      BOOST_TEST((out.type() == dtype::u8));
      const tensor wa = encode(c, floats(a.data(), 10), ra), wb = encode(c, floats(b.data(), 6), rb);
      BOOST_REQUIRE(out.nbytes() == wa.nbytes() + wb.nbytes());
      BOOST_TEST(same_bytes(out, wa.bytes(), wa.nbytes()));
      BOOST_TEST(std::memcmp(out.bytes() + wa.nbytes(), wb.bytes(), wb.nbytes()) == 0);
    }
  }
  // A push of part 2 alone uses part 2's residual, untouched by part 1's.
  const tensor alone = pc.encode_parts({part(2, b)});
  const tensor wb = encode(c, floats(b.data(), 6), rb);
  BOOST_TEST(same_bytes(alone, wb.bytes(), wb.nbytes()));
  // Values below the threshold go out only once their residual has grown past it: the
  // second push of them differs from the first.
  push_compressor fresh(c);
  const auto small = values(4, 0.1f);  // |x| <= 0.3 < 0.5
  const tensor first = fresh.encode_parts({part(9, small)});
  const tensor second = fresh.encode_parts({part(9, small)});
  BOOST_TEST(std::memcmp(first.bytes(), second.bytes(), first.nbytes()) != 0);
}
