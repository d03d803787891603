// Tests for client/pull_answer.cpp: an answer in the message is split over the caller's
// parts with each part's version, in f32 or decoded from fp16 or bf16; an answer of the
// wrong size, dtype or number of versions, or in shared memory the member did not offer,
// is a malformed fault naming the shard and leaves the caller's arrays as they were, as
// is an answer with no values at all.
#define BOOST_TEST_MODULE pull_answer
#include <boost/test/unit_test.hpp>

#include <string>
#include <variant>
#include <vector>

#include "client/pull_answer.hpp"

using namespace troupe;
using namespace troupe::kv;

namespace {

constexpr float untouched = -7.f;

struct caller {
  std::vector<float> a = std::vector<float>(2, untouched), b = std::vector<float>(3, untouched);
  std::vector<pull_part> parts() { return {{10, a.data(), 2, {}, 0}, {11, b.data(), 3, {}, 0}}; }
  bool unchanged() const {
    for (float v : a)
      if (v != untouched) return false;
    for (float v : b)
      if (v != untouched) return false;
    return true;
  }
};

tensor values(std::vector<float> v) {
  tensor t({static_cast<std::int64_t>(v.size())});
  for (std::size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

kv_pull_reply reply_of(tensor data, std::vector<std::int64_t> versions) {
  kv_pull_reply r;
  r.shard = 3;
  r.versions = std::move(versions);
  r.data = std::move(data);
  return r;
}

// A pull of shard 3 that offered no reply slot (no links: every answer in the message).
shard_call unoffered(nullptr, 3);

// The fault's detail, or "" when the answer was taken.
std::string malformed(const or_fault<std::vector<part_result>>& r) {
  const auto* f = std::get_if<fault>(&r);
  if (!f) return "";
  BOOST_TEST((f->code == errc::malformed));
  return f->detail;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_answer_in_the_message_fills_each_part_with_its_version) {
  caller c;
  auto parts = c.parts();
  kv_pull_reply r = reply_of(values({1, 2, 3, 4, 5}), {7, 9});
  const auto got = unpack_pull(r, parts, 5, unoffered, grad_codec{});
  BOOST_REQUIRE(std::holds_alternative<std::vector<part_result>>(got));
  const auto& results = std::get<std::vector<part_result>>(got);
  BOOST_REQUIRE(results.size() == 2u);
  BOOST_TEST(results[0].part == 10u);
  BOOST_TEST(results[0].version == 7);
  BOOST_TEST(results[1].part == 11u);
  BOOST_TEST(results[1].version == 9);
  BOOST_TEST(c.a == (std::vector<float>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(c.b == (std::vector<float>{3, 4, 5}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(an_answer_in_half_precision_is_decoded_into_the_parts) {
  for (const codec_kind kind : {codec_kind::fp16, codec_kind::bf16}) {
    const grad_codec precision{kind};
    caller c;
    auto parts = c.parts();
    // Values both formats hold exactly.
    kv_pull_reply r = reply_of(encode(precision, values({0.5f, -2.f, 1.f, 0.f, 3.f})), {1, 1});
    const auto got = unpack_pull(r, parts, 5, unoffered, precision);
    BOOST_TEST_CONTEXT(to_string(precision)) {
      BOOST_REQUIRE(std::holds_alternative<std::vector<part_result>>(got));
      BOOST_TEST(c.a == (std::vector<float>{0.5f, -2.f}), boost::test_tools::per_element());
      BOOST_TEST(c.b == (std::vector<float>{1.f, 0.f, 3.f}), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_malformed_answer_names_the_shard_and_writes_nothing) {
  struct bad {
    const char* what;
    kv_pull_reply reply;
    grad_codec precision;
    const char* says;
  };
  kv_pull_reply in_shared_memory = reply_of(tensor{}, {1, 1});
  in_shared_memory.shared.segment = "troupe-someone";
  const std::vector<bad> cases{
      {"too few values", reply_of(values({1, 2, 3, 4}), {1, 1}), grad_codec{},
       "a pull of 2 parts (5 f32 values) with 4 f32 values and 2 versions"},
      {"a version short", reply_of(values({1, 2, 3, 4, 5}), {1}), grad_codec{}, "with 5 f32 values and 1 versions"},
      {"bf16 where fp16 belongs", reply_of(encode(grad_codec{codec_kind::bf16}, values({1, 2, 3, 4, 5})), {1, 1}),
       grad_codec{codec_kind::fp16}, "(5 f16 values) with 5 bf16 values"},
      {"fp16 values, too few", reply_of(encode(grad_codec{codec_kind::fp16}, values({1, 2})), {1, 1}),
       grad_codec{codec_kind::fp16}, "(5 f16 values) with 2 f16 values"},
      {"fp16 values with no precision asked", reply_of(encode(grad_codec{codec_kind::fp16}, values({1, 2, 3, 4, 5})),
                                                       {1, 1}),
       grad_codec{}, "(5 f32 values) with 5 f16 values"},
      {"shared memory it did not offer", in_shared_memory, grad_codec{}, "did not offer"},
  };
  for (auto b : cases) {
    BOOST_TEST_CONTEXT(b.what) {
      caller c;
      auto parts = c.parts();
      const std::string why = malformed(unpack_pull(b.reply, parts, 5, unoffered, b.precision));
      BOOST_TEST(why.find("shard 3") != std::string::npos, why);
      BOOST_TEST(why.find(b.says) != std::string::npos, why);
      BOOST_TEST(c.unchanged());
    }
  }
}

// A tensor without a buffer has the shape of a scalar, one element: an answer with no
// values to a pull of one float is refused, not read.
BOOST_AUTO_TEST_CASE(an_answer_without_values_is_refused_not_read) {
  float one = untouched;
  std::vector<pull_part> parts{{4, &one, 1, {}, 0}};
  kv_pull_reply r = reply_of(tensor{}, {1});
  const std::string why = malformed(unpack_pull(r, parts, 1, unoffered, grad_codec{}));
  BOOST_TEST(why.find("shard 3 answered a pull of 1 parts (1 f32 values) with 0 f32 values") != std::string::npos, why);
  BOOST_TEST(one == untouched);
}
