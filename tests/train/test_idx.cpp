// Tests for train/idx.cpp: raw and gzip files that are good, truncated, of the wrong
// magic or rank, with trailing bytes, or with corrupt compression. Every failure message
// names the file.
#define BOOST_TEST_MODULE idx
#include <boost/test/unit_test.hpp>

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/support/temp_dir.hpp"
#include "train/idx.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

std::vector<unsigned char> idx_bytes(std::vector<std::uint32_t> dims, unsigned char type = 0x08) {
  std::vector<unsigned char> b = {0, 0, type, static_cast<unsigned char>(dims.size())};
  std::size_t n = 1;
  for (auto d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
    n *= d;
  }
  for (std::size_t i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(i % 251));
  return b;
}

std::string write_raw(const fs::path& p, const std::vector<unsigned char>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  return p.string();
}

std::string write_gz(const fs::path& p, const std::vector<unsigned char>& b) {
  gzFile f = gzopen(p.c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
  return p.string();
}

void expect_failure(const expected<idx_array>& r, const std::string& path, const std::string& fragment) {
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find(path) != std::string::npos);
  BOOST_TEST_INFO("message: " << r.error().message);
  BOOST_TEST(r.error().message.find(fragment) != std::string::npos);
}

}  // namespace

BOOST_AUTO_TEST_CASE(reads_raw_and_gzip) {
  test::temp_dir d{"idx"};
  const auto bytes = idx_bytes({3, 4, 5});
  for (const auto& path : {write_raw(d.path / "a.idx", bytes), write_gz(d.path / "a.idx.gz", bytes)}) {
    auto r = read_idx(path, 3);
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->dims == (std::vector<std::int64_t>{3, 4, 5}));
    BOOST_TEST(r->data.size() == 60u);
    BOOST_TEST(r->data[59] == 59);
  }
}

BOOST_AUTO_TEST_CASE(truncated_files) {
  test::temp_dir d{"idx"};
  auto bytes = idx_bytes({10, 2});
  bytes.resize(bytes.size() - 3);
  const auto p = write_raw(d.path / "t.idx", bytes);
  expect_failure(read_idx(p, 2), p, "truncated");
  const auto header_only = write_raw(d.path / "h.idx", {0, 0, 8});
  expect_failure(read_idx(header_only, 1), header_only, "shorter than an IDX header");
  auto short_dims = idx_bytes({10, 2});
  short_dims.resize(6);
  const auto sd = write_raw(d.path / "sd.idx", short_dims);
  expect_failure(read_idx(sd, 2), sd, "truncated inside the IDX header");
}

BOOST_AUTO_TEST_CASE(truncated_gzip_stream) {
  test::temp_dir d{"idx"};
  const auto full = write_gz(d.path / "full.gz", idx_bytes({1000, 10}));
  std::vector<char> gz(fs::file_size(full));
  std::ifstream(full, std::ios::binary).read(gz.data(), gz.size());
  gz.resize(gz.size() / 2);
  const auto p = write_raw(d.path / "half.gz", {gz.begin(), gz.end()});
  auto r = read_idx(p, 2);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find(p) != std::string::npos);
}

BOOST_AUTO_TEST_CASE(wrong_magic_type_and_rank) {
  test::temp_dir d{"idx"};
  auto bytes = idx_bytes({4});
  bytes[0] = 0x1f;
  const auto magic = write_raw(d.path / "m.idx", bytes);
  expect_failure(read_idx(magic, 1), magic, "bad magic");
  const auto type = write_raw(d.path / "f.idx", idx_bytes({4}, 0x0D));
  expect_failure(read_idx(type, 1), type, "not supported");
  const auto rank = write_raw(d.path / "r.idx", idx_bytes({4, 4, 4}));
  expect_failure(read_idx(rank, 1), rank, "expected a rank-1");
}

BOOST_AUTO_TEST_CASE(trailing_bytes_and_missing_file) {
  test::temp_dir d{"idx"};
  auto bytes = idx_bytes({4});
  bytes.push_back(1);
  const auto p = write_raw(d.path / "x.idx", bytes);
  expect_failure(read_idx(p, 1), p, "bytes after the data");
  const auto missing = (d.path / "nope.idx").string();
  expect_failure(read_idx(missing, 1), missing, "no such file");
}

BOOST_AUTO_TEST_CASE(zero_dimension_is_rejected) {
  test::temp_dir d{"idx"};
  const auto p = write_raw(d.path / "z.idx", idx_bytes({0, 3}));
  expect_failure(read_idx(p, 2), p, "is zero");
}
