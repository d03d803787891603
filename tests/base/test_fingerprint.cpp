// Tests for base/fingerprint.cpp: FNV-1a 64 against the published test vectors, and its
// hex rendering.
#define BOOST_TEST_MODULE fingerprint
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "base/fingerprint.hpp"

using troupe::fnv1a64;
using troupe::hex64;

namespace {
std::uint64_t of(const char* s) { return fnv1a64(s, std::strlen(s)); }
}  // namespace

BOOST_AUTO_TEST_CASE(matches_the_published_vectors) {
  BOOST_TEST(of("") == 0xcbf29ce484222325ull);
  BOOST_TEST(of("a") == 0xaf63dc4c8601ec8cull);
  BOOST_TEST(of("foobar") == 0x85944171f73967e8ull);
}

BOOST_AUTO_TEST_CASE(one_flipped_bit_changes_the_fingerprint) {
  float a[4] = {1.f, 2.f, 3.f, 4.f}, b[4] = {1.f, 2.f, 3.f, 4.f};
  BOOST_TEST(fnv1a64(a, sizeof a) == fnv1a64(b, sizeof b));
  unsigned char* bytes = reinterpret_cast<unsigned char*>(b);
  bytes[9] ^= 1;
  BOOST_TEST(fnv1a64(a, sizeof a) != fnv1a64(b, sizeof b));
}

BOOST_AUTO_TEST_CASE(renders_sixteen_hex_digits) {
  BOOST_TEST(hex64(0) == "0000000000000000");
  BOOST_TEST(hex64(0x85944171f73967e8ull) == "85944171f73967e8");
}
