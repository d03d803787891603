// Tests for tensor/tensor_file.cpp (Note [Tensor files]): sections of every dtype and
// rank and the description come back bit-exactly; every corruption is named — a flipped
// bit in a section, in the description or in the start, a truncated file, trailing bytes,
// a newer format version, another kind, a file that is not Troupe's, a missing one — and
// a failed write leaves the previous file readable.
#define BOOST_TEST_MODULE tensor_file
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "tensor/tensor_file.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

tensor floats(std::int64_t n, float base) {
  tensor t = tensor::uninitialized({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = base + 0.5f * static_cast<float>(i);
  return t;
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.type() == b.type() && a.sizes().str() == b.sizes().str() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void put_bytes(const fs::path& p, const std::string& b) { std::ofstream(p, std::ios::binary) << b; }

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A file with three sections: 3 MiB of floats (several write chunks), a 2-d i32 block and
// an empty one.
struct sample_file {
  test::temp_dir dir{"tensor-file"};
  fs::path path = dir.path / "state.tf";
  tensor big = floats(3 * (1 << 18) + 5, 1.f), ids = tensor::uninitialized({2, 3}, dtype::i32),
         none = tensor::uninitialized({0});
  sample_file() {
    for (int i = 0; i < 6; ++i) ids.data<std::int32_t>()[i] = i * 7 - 3;
    BOOST_REQUIRE(!write_tensor_file(path, "test-state", {{"step", 42}, {"note", "hello"}},
                                     {{"weights", big.view()}, {"ids", ids.view()}, {"empty", none.view()}}));
  }
  // What reading the file says after `damage` changes its bytes.
  std::string after(const std::function<void(std::string&)>& damage) {
    std::string b = bytes_of(path);
    damage(b);
    put_bytes(path, b);
    auto r = read_tensor_file(path, "test-state");
    BOOST_REQUIRE(!r.has_value());
    return r.error().message;
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(sections_and_description_come_back_bit_exactly, sample_file) {
  auto r = read_tensor_file(path, "test-state");
  BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
  BOOST_TEST(r->kind == "test-state");
  BOOST_TEST(r->meta["step"].get<int>() == 42);
  BOOST_TEST(r->meta["note"].get<std::string>() == "hello");
  BOOST_REQUIRE(r->sections.size() == 3u);
  BOOST_TEST(r->sections[0].first == "weights");
  BOOST_TEST(same_bits(*r->find("weights"), big));
  BOOST_TEST(same_bits(*r->find("ids"), ids));
  BOOST_TEST(r->find("empty")->numel() == 0);
  BOOST_TEST(r->find("nothing") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(a_flipped_bit_anywhere_is_named, sample_file) {
  const std::string original = bytes_of(path);
  const std::size_t footer_start = original.find("{\"kind\"");
  BOOST_REQUIRE(footer_start != std::string::npos);
  struct where {
    std::size_t at;
    std::string said;
  };
  for (const auto& w : {where{16 + 12345, "section 'weights' fails its CRC-32C"},
                        where{16 + big.nbytes() + 3, "section 'ids' fails its CRC-32C"},
                        where{footer_start + 5, "description fails its CRC-32C"}, where{2, "not a Troupe file"},
                        where{original.size() - 3, "does not end as a Troupe file does"}}) {
    put_bytes(path, original);
    const std::string why = after([&](std::string& b) { b[w.at] = static_cast<char>(b[w.at] ^ 0x10); });
    BOOST_TEST(has(why, w.said), why);
    BOOST_TEST(has(why, path.string()), why);
  }
}

BOOST_FIXTURE_TEST_CASE(a_truncated_or_extended_file_is_named, sample_file) {
  const std::string original = bytes_of(path);
  for (std::size_t cut : {std::size_t{1}, std::size_t{30}, original.size() / 2, original.size() - 10}) {
    put_bytes(path, original);
    const std::string why = after([&](std::string& b) { b.resize(b.size() - cut); });
    BOOST_TEST((has(why, "truncated") || has(why, "too short")), why);
  }
  put_bytes(path, original);
  BOOST_TEST(has(after([](std::string& b) { b += "extra"; }), "does not end as a Troupe file does"));
  put_bytes(path, original);  // bytes slipped in before the description
  const std::string why = after([&](std::string& b) { b.insert(16 + big.nbytes(), "xxxx"); });
  BOOST_TEST(has(why, "damaged"), why);
}

BOOST_FIXTURE_TEST_CASE(another_version_kind_or_file_is_named, sample_file) {
  const std::string original = bytes_of(path);
  const std::string newer = after([](std::string& b) { b[8] = 2; });
  BOOST_TEST(has(newer, "format version 2 by a newer Troupe"), newer);
  put_bytes(path, original);
  auto other = read_tensor_file(path, "troupe-model");
  BOOST_REQUIRE(!other.has_value());
  BOOST_TEST(has(other.error().message, "a test-state file, not a troupe-model file"), other.error().message);
  put_bytes(path, std::string(100, 'x'));
  auto junk = read_tensor_file(path, "test-state");
  BOOST_TEST(has(junk.error().message, "not a Troupe file"), junk.error().message);
  auto missing = read_tensor_file(dir.path / "missing.tf", "test-state");
  BOOST_TEST(has(missing.error().message, "cannot open"), missing.error().message);
}

BOOST_FIXTURE_TEST_CASE(a_failed_write_leaves_the_previous_file_readable, sample_file) {
  const tensor other = floats(10, 9.f);
  auto why = write_tensor_file(path, "test-state", {}, {{"a", other.view()}, {"a", other.view()}});
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(has(*why, "two sections are named 'a'"), *why);
  why = write_tensor_file(dir.path / "no-such-dir" / "x.tf", "test-state", {}, {{"a", other.view()}});
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(has(*why, "no-such-dir"), *why);
  auto r = read_tensor_file(path, "test-state");
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(same_bits(*r->find("weights"), big));
}
