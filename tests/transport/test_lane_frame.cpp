// Tests for transport/lane_frame.cpp: headers round-trip, every malformed field is named before
// anything is allocated, and tokens are random and compared whole.
#define BOOST_TEST_MODULE lane_frame
#include <boost/test/unit_test.hpp>

#include "transport/lane_frame.hpp"

using namespace troupe;
using namespace troupe::lane;

namespace {

// The decode of h's bytes after `edit`, against a 1 MiB bound.
expected<frame_header> edited(const frame_header& h, void (*edit)(header_bytes_t&)) {
  auto b = encode_header(h);
  edit(b);
  return decode_header(b, 1 << 20);
}

bool says(const expected<frame_header>& r, const std::string& what) {
  return !r && r.error().message.find(what) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(headers_round_trip) {
  const auto p = decode_header(encode_header(payload_header(0x0102030405060708ull, dtype::bf16, 4096)), 1 << 20);
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST((p->kind == frame_kind::payload));
  BOOST_TEST((p->type == dtype::bf16));
  BOOST_TEST(p->ticket == 0x0102030405060708ull);
  BOOST_TEST(p->nbytes == 4096u);
  const auto h = decode_header(encode_header(hello_header(direction::to_member)), 0);
  BOOST_REQUIRE(h.has_value());
  BOOST_TEST((h->kind == frame_kind::hello && h->way == direction::to_member && h->nbytes == token_bytes));
  const auto w = decode_header(encode_header(welcome_header()), 0);
  BOOST_REQUIRE(w.has_value());
  BOOST_TEST((w->kind == frame_kind::welcome && w->nbytes == 0));
}

BOOST_AUTO_TEST_CASE(the_wire_is_little_endian) {
  const auto b = encode_header(payload_header(1, dtype::f32, 8));
  BOOST_TEST(static_cast<int>(b[0]) == 'T');
  BOOST_TEST(static_cast<int>(b[3]) == 'L');
  BOOST_TEST(static_cast<int>(b[8]) == 1);   // ticket's low byte first
  BOOST_TEST(static_cast<int>(b[16]) == 8);  // length's low byte first
}

BOOST_AUTO_TEST_CASE(every_bad_field_is_named) {
  const frame_header ok = payload_header(7, dtype::f32, 64);
  BOOST_TEST(says(edited(ok, [](header_bytes_t& b) { b[0] = std::byte{'X'}; }), "not a Troupe lane frame"));
  BOOST_TEST(says(edited(ok, [](header_bytes_t& b) { b[4] = std::byte{9}; }), "version 9"));
  BOOST_TEST(says(edited(ok, [](header_bytes_t& b) { b[5] = std::byte{0}; }), "unknown kind 0"));
  BOOST_TEST(says(edited(ok, [](header_bytes_t& b) { b[5] = std::byte{4}; }), "unknown kind 4"));
  BOOST_TEST(says(edited(ok, [](header_bytes_t& b) { b[6] = std::byte{200}; }), "unknown dtype 200"));
  BOOST_TEST(says(edited(ok, [](header_bytes_t& b) { b[7] = std::byte{2}; }), "unknown direction 2"));
}

BOOST_AUTO_TEST_CASE(a_payload_is_checked_against_the_bound_and_its_dtype) {
  BOOST_TEST(says(decode_header(encode_header(payload_header(1, dtype::f32, (1 << 20) + 4)), 1 << 20),
                  "above this job's bound"));
  BOOST_TEST(decode_header(encode_header(payload_header(1, dtype::f32, 1 << 20)), 1 << 20).has_value());
  BOOST_TEST(says(decode_header(encode_header(payload_header(1, dtype::f32, 6)), 1 << 20), "not a whole number"));
  BOOST_TEST(says(decode_header(encode_header(payload_header(1, dtype::f32, 0)), 1 << 20), "empty lane payload"));
  // A header that claims 2^63 bytes is refused before anyone allocates.
  BOOST_TEST(says(decode_header(encode_header(payload_header(1, dtype::u8, std::uint64_t{1} << 63)), 1 << 20),
                  "above this job's bound"));
}

BOOST_AUTO_TEST_CASE(hellos_and_welcomes_have_fixed_lengths) {
  frame_header h = hello_header(direction::to_shard);
  h.nbytes = 31;
  BOOST_TEST(says(decode_header(encode_header(h), 0), "not 32"));
  frame_header w = welcome_header();
  w.nbytes = 1;
  BOOST_TEST(says(decode_header(encode_header(w), 0), "welcome that carries 1 bytes"));
}

BOOST_AUTO_TEST_CASE(tokens_are_random_and_compared_whole) {
  const auto a = random_token(), b = random_token();
  BOOST_REQUIRE((a.has_value() && b.has_value()));
  BOOST_TEST(!tokens_equal(*a, *b));
  BOOST_TEST(tokens_equal(*a, *a));
  token c = *a;
  c[31] ^= 1;  // the last byte counts as much as the first
  BOOST_TEST(!tokens_equal(*a, c));
}
