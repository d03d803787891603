// Tests for base/crc32c.cpp: RFC 3720's published vectors (B.4) and the classic check
// value, by the instruction and by tables; continuing a CRC over split input; every
// length and alignment agreeing between the two ways.
#define BOOST_TEST_MODULE crc32c
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/crc32c.hpp"

using namespace troupe;

namespace {

std::vector<unsigned char> bytes(int n, const std::function<int(int)>& f) {
  std::vector<unsigned char> b(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) b[static_cast<std::size_t>(i)] = static_cast<unsigned char>(f(i));
  return b;
}

}  // namespace

BOOST_AUTO_TEST_CASE(published_vectors) {
  struct vec {
    std::vector<unsigned char> data;
    std::uint32_t want;
  };
  // RFC 3720, appendix B.4; and "123456789", the check value of every CRC catalogue.
  const std::string digits = "123456789";
  const std::vector<vec> vectors = {
      {bytes(32, [](int) { return 0x00; }), 0x8A9136AAu},
      {bytes(32, [](int) { return 0xFF; }), 0x62A8AB43u},
      {bytes(32, [](int i) { return i; }), 0x46DD794Eu},
      {bytes(32, [](int i) { return 31 - i; }), 0x113FDB5Cu},
      {{digits.begin(), digits.end()}, 0xE3069283u},
      {{}, 0u},
  };
  for (const auto& v : vectors) {
    BOOST_TEST(crc32c(v.data.data(), v.data.size()) == v.want);
    BOOST_TEST(crc32c_portable(v.data.data(), v.data.size()) == v.want);
  }
  BOOST_TEST_MESSAGE("crc32c in hardware: " << crc32c_in_hardware());
}

BOOST_AUTO_TEST_CASE(a_crc_continues_over_split_input) {
  std::mt19937 rng(7);
  std::vector<unsigned char> data(4099);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  const std::uint32_t whole = crc32c(data.data(), data.size());
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{2048},
                          data.size()}) {
    BOOST_TEST(crc32c(data.data() + cut, data.size() - cut, crc32c(data.data(), cut)) == whole);
    BOOST_TEST(crc32c_portable(data.data() + cut, data.size() - cut, crc32c_portable(data.data(), cut)) == whole);
  }
}

BOOST_AUTO_TEST_CASE(instruction_and_tables_agree_at_every_length_and_alignment) {
  std::mt19937 rng(11);
  std::vector<unsigned char> data(300);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (std::size_t at = 0; at < 9; ++at)
    for (std::size_t n = 0; at + n <= data.size(); n += 1 + n / 4)
      BOOST_TEST(crc32c(data.data() + at, n) == crc32c_portable(data.data() + at, n), "at " << at << " n " << n);
}

BOOST_AUTO_TEST_CASE(one_flipped_bit_changes_the_crc) {
  std::vector<unsigned char> data(1 << 16, 0x5A);
  const std::uint32_t before = crc32c(data.data(), data.size());
  for (std::size_t bit : {std::size_t{0}, std::size_t{12345}, data.size() * 8 - 1}) {
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    BOOST_TEST(crc32c(data.data(), data.size()) != before);
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  }
}
