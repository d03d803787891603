// Tests for tensor/npz_file.cpp, by reading the archive back byte by byte: each entry's
// local header, name, stored size and CRC-32, its .npy header (version 1.0, padded to 64
// bytes, the dtype and shape) and its data bit-exactly; the central directory and the end
// record; and the refusals (an unsupported dtype, a duplicate name). numpy reading the
// files is tested end to end in tests/tools/test_model_export.py.
#define BOOST_TEST_MODULE npz_file
#include <boost/test/unit_test.hpp>

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "tensor/npz_file.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;

namespace {

std::uint64_t le(const std::string& b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

struct stored {
  std::string name, npy_dict, data;
};

// The entries of an archive, checked as they are read.
std::vector<stored> read_zip(const std::string& b) {
  std::vector<stored> out;
  std::size_t at = 0;
  while (le(b, at, 4) == 0x04034b50) {
    BOOST_TEST(le(b, at + 8, 2) == 0u);  // stored
    const auto crc = static_cast<std::uint32_t>(le(b, at + 14, 4));
    const auto size = le(b, at + 18, 4);
    BOOST_TEST(le(b, at + 22, 4) == size);
    const auto name_len = le(b, at + 26, 2);
    stored s;
    s.name = b.substr(at + 30, name_len);
    const std::string body = b.substr(at + 30 + name_len, size);
    BOOST_TEST(::crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())) == crc);
    BOOST_TEST(body.compare(0, 6, "\x93NUMPY") == 0);
    BOOST_TEST(body[6] == 1);
    const auto dict_len = le(body, 8, 2);
    BOOST_TEST((10 + dict_len) % 64 == 0u);
    s.npy_dict = body.substr(10, dict_len);
    BOOST_TEST(s.npy_dict.back() == '\n');
    s.data = body.substr(10 + dict_len);
    out.push_back(s);
    at += 30 + name_len + size;
  }
  const std::size_t directory = at;
  for (std::size_t i = 0; i < out.size(); ++i) {
    BOOST_REQUIRE(le(b, at, 4) == 0x02014b50u);
    at += 46 + le(b, at + 28, 2);
  }
  BOOST_REQUIRE(le(b, at, 4) == 0x06054b50u);
  BOOST_TEST(le(b, at + 10, 2) == out.size());
  BOOST_TEST(le(b, at + 12, 4) == at - directory);
  BOOST_TEST(le(b, at + 16, 4) == directory);
  BOOST_TEST(at + 22 == b.size());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_array_comes_back_with_its_dtype_shape_and_bits) {
  test::temp_dir dir("npz");
  tensor w = tensor::uninitialized({2, 3});
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = 0.25f * static_cast<float>(i) - 1.f;
  tensor b = tensor::uninitialized({5}, dtype::i32);
  for (int i = 0; i < 5; ++i) b.data<std::int32_t>()[i] = -i;
  tensor flags = tensor::uninitialized({1, 1, 2}, dtype::u8);
  flags.data<std::uint8_t>()[0] = 7;
  flags.data<std::uint8_t>()[1] = 255;
  const auto path = dir.path / "model.npz";
  BOOST_REQUIRE(!write_npz(path, {{"fc1.weight", w.view()}, {"ids", b.view()}, {"flags", flags.view()}}));
  std::ifstream in(path, std::ios::binary);
  const auto got = read_zip({std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
  BOOST_REQUIRE(got.size() == 3u);
  BOOST_TEST(got[0].name == "fc1.weight.npy");
  BOOST_TEST(got[0].npy_dict.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") == 0u);
  BOOST_TEST(got[0].data == std::string(reinterpret_cast<const char*>(w.bytes()), w.nbytes()));
  BOOST_TEST(got[1].npy_dict.find("'shape': (5,)") != std::string::npos);
  BOOST_TEST(got[1].npy_dict.find("'<i4'") != std::string::npos);
  BOOST_TEST(got[1].data == std::string(reinterpret_cast<const char*>(b.bytes()), b.nbytes()));
  BOOST_TEST(got[2].npy_dict.find("'|u1'") != std::string::npos);
  BOOST_TEST(got[2].npy_dict.find("(1, 1, 2)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(what_npz_cannot_hold_is_refused_by_name) {
  test::temp_dir dir("npz");
  tensor half = tensor::uninitialized({4}, dtype::f16), f = tensor::uninitialized({4});
  auto why = write_npz(dir.path / "a.npz", {{"h", half.view()}});
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("array 'h' is f16") != std::string::npos, *why);
  why = write_npz(dir.path / "a.npz", {{"x", f.view()}, {"x", f.view()}});
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("unique") != std::string::npos, *why);
  BOOST_TEST(!std::filesystem::exists(dir.path / "a.npz"));
}
