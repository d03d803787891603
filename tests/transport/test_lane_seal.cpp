// Tests for transport/lane_seal.cpp: a unit sealed by one side opens on the other, bit for bit;
// one altered bit, a replayed or reordered unit, or a unit opened with the keys of the
// other direction fails its check.
#define BOOST_TEST_MODULE lane_seal
#include <boost/test/unit_test.hpp>

#include <numeric>
#include <vector>

#include "transport/lane_seal.hpp"

using namespace troupe::lane;

namespace {

seal_key key(std::uint8_t first) {
  seal_key k{};
  std::iota(k.begin(), k.end(), first);
  return k;
}

// The dialler's and the listener's sealers of one connection.
struct pair_of_ends {
  sealer dialler{key(1), key(100)};
  sealer listener{key(100), key(1)};
};

std::vector<std::uint8_t> bytes(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 31);
  return v;
}

std::vector<std::uint8_t> sealed(sealer& s, const std::vector<std::uint8_t>& plain) {
  std::vector<std::uint8_t> out(plain.size() + seal_tag);
  s.seal(plain.data(), plain.size(), out.data());
  return out;
}

bool opens(sealer& s, std::vector<std::uint8_t> unit, std::vector<std::uint8_t>* plain = nullptr) {
  const std::size_t n = unit.size() - seal_tag;
  const bool ok = s.open(unit.data(), n, unit.data() + n);
  if (plain) plain->assign(unit.begin(), unit.begin() + static_cast<std::ptrdiff_t>(n));
  return ok;
}

}  // namespace

BOOST_AUTO_TEST_CASE(units_open_in_order_bit_for_bit) {
  pair_of_ends e;
  for (std::size_t n : {std::size_t{1}, std::size_t{24}, seal_unit}) {
    const auto plain = bytes(n, static_cast<std::uint8_t>(n));
    const auto unit = sealed(e.dialler, plain);
    if (n >= 24)  // the wire does not carry the bytes as they are
      BOOST_TEST((std::vector<std::uint8_t>(unit.begin(), unit.begin() + 24) !=
                  std::vector<std::uint8_t>(plain.begin(), plain.begin() + 24)));
    std::vector<std::uint8_t> got;
    BOOST_TEST(opens(e.listener, unit, &got));
    BOOST_TEST(got == plain);
  }
  // And the other way, with the other key.
  std::vector<std::uint8_t> got;
  BOOST_TEST(opens(e.dialler, sealed(e.listener, bytes(100, 7)), &got));
  BOOST_TEST(got == bytes(100, 7));
}

BOOST_AUTO_TEST_CASE(one_altered_bit_fails_in_the_data_or_the_tag) {
  for (std::size_t at : {std::size_t{0}, std::size_t{500}, std::size_t{1000 + seal_tag - 1}}) {
    pair_of_ends e;
    auto unit = sealed(e.dialler, bytes(1000, 3));
    unit[at] ^= 0x01;
    BOOST_TEST(!opens(e.listener, unit), "bit at " << at);
  }
}

BOOST_AUTO_TEST_CASE(a_replayed_or_reordered_unit_fails) {
  pair_of_ends e;
  const auto first = sealed(e.dialler, bytes(64, 1));
  const auto second = sealed(e.dialler, bytes(64, 2));
  BOOST_TEST(!opens(e.listener, second));  // out of order: the listener expects the first

  pair_of_ends f;
  const auto unit = sealed(f.dialler, bytes(64, 1));
  BOOST_TEST(opens(f.listener, unit));
  BOOST_TEST(!opens(f.listener, unit));  // the same unit again
}

BOOST_AUTO_TEST_CASE(a_unit_does_not_open_in_the_direction_it_was_not_sealed_for) {
  pair_of_ends e;
  const auto unit = sealed(e.dialler, bytes(64, 9));
  BOOST_TEST(!opens(e.dialler, unit));  // reflected back to its sender
  sealer stranger{key(1), key(50)};     // another connection's keys
  BOOST_TEST(!opens(stranger, sealed(e.dialler, bytes(64, 9))));
}
