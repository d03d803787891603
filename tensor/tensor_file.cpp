// tensor_file: writing and checking Troupe's files of named tensors (Note [Tensor files]).
#include "tensor/tensor_file.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <set>

#include "base/crc32c.hpp"
#include "base/durable_file.hpp"

namespace troupe {

namespace {

constexpr char head_magic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 't', 'f'};
constexpr char end_magic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 'n', 'd'};
constexpr std::size_t head_bytes = 16;
constexpr std::size_t end_bytes = 24;  // footer length, its CRC, version, magic
constexpr std::uint64_t max_footer_bytes = 16u << 20;
// Sections are written and checked in chunks this size, so a chunk's CRC is computed
// while it is in cache.
constexpr std::size_t chunk = 1u << 20;

void put_le(unsigned char* at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint64_t get_le(const unsigned char* at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
  return v;
}

std::string hex32(std::uint32_t v) {
  char b[9];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

std::optional<dtype> dtype_named(const std::string& name) {
  for (auto t : {dtype::f32, dtype::f16, dtype::bf16, dtype::i32, dtype::u8})
    if (name_of(t) == name) return t;
  return std::nullopt;
}

// A section as the footer describes it, checked for form.
struct section_entry {
  std::string name;
  dtype type = dtype::f32;
  shape dims;
  std::uint64_t offset = 0, bytes = 0;
  std::uint32_t crc = 0;
};

expected<section_entry> entry_of(const nlohmann::json& j) {
  section_entry e;
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("dtype") ||
      !j["dtype"].is_string() || !j.contains("shape") || !j["shape"].is_array() || !j.contains("offset") ||
      !j["offset"].is_number_unsigned() || !j.contains("bytes") || !j["bytes"].is_number_unsigned() ||
      !j.contains("crc32c") || !j["crc32c"].is_string())
    return failure{"a section lacks its name, dtype, shape, offset, bytes or crc32c"};
  e.name = j["name"].get<std::string>();
  auto t = dtype_named(j["dtype"].get<std::string>());
  if (!t) return failure{"section '" + e.name + "' has an unknown dtype '" + j["dtype"].get<std::string>() + "'"};
  e.type = *t;
  const auto& dims = j["shape"];
  if (dims.size() > static_cast<std::size_t>(shape::max_rank))
    return failure{"section '" + e.name + "' has rank " + std::to_string(dims.size())};
  std::vector<std::int64_t> d;
  std::uint64_t count = 1;
  for (const auto& x : dims) {
    if (!x.is_number_unsigned()) return failure{"section '" + e.name + "' has a shape that is not of counts"};
    const auto v = x.get<std::uint64_t>();
    if (v > 0 && count > (std::uint64_t{1} << 62) / v) return failure{"section '" + e.name + "' is impossibly large"};
    count *= v;
    d.push_back(static_cast<std::int64_t>(v));
  }
  e.dims = shape(std::span<const std::int64_t>(d));
  e.offset = j["offset"].get<std::uint64_t>();
  e.bytes = j["bytes"].get<std::uint64_t>();
  if (e.bytes != count * size_of(e.type))
    return failure{"section '" + e.name + "' says " + std::to_string(e.bytes) + " bytes for its shape's " +
                   std::to_string(count * size_of(e.type))};
  const std::string crc = j["crc32c"].get<std::string>();
  char* end = nullptr;
  const unsigned long v = std::strtoul(crc.c_str(), &end, 16);
  if (crc.size() != 8 || end != crc.c_str() + 8) return failure{"section '" + e.name + "' has a malformed crc32c"};
  e.crc = static_cast<std::uint32_t>(v);
  return e;
}

}  // namespace

const tensor* tensor_file::find(const std::string& name) const {
  for (const auto& [n, t] : sections)
    if (n == name) return &t;
  return nullptr;
}

std::optional<std::string> write_tensor_file(const std::filesystem::path& path, const std::string& kind,
                                             const nlohmann::json& meta,
                                             const std::vector<std::pair<std::string, const_tensor_view>>& sections) {
  std::set<std::string> names;
  for (const auto& [name, t] : sections) {
    if (!names.insert(name).second) return "cannot write " + path.string() + ": two sections are named '" + name + "'";
    if (!t.is_contiguous() || t.where().kind != device_kind::cpu)
      return "cannot write " + path.string() + ": section '" + name + "' is not contiguous in host memory";
  }
  auto f = durable_file::create(path);
  if (!f) return f.error().message;
  unsigned char head[head_bytes] = {};
  std::memcpy(head, head_magic, 8);
  put_le(head + 8, tensor_file_version, 4);
  if (auto e = f->write(head, sizeof head)) return e;
  nlohmann::json listed = nlohmann::json::array();
  std::uint64_t offset = head_bytes;
  for (const auto& [name, t] : sections) {
    const auto* p = reinterpret_cast<const unsigned char*>(t.bytes());
    const std::size_t n = t.nbytes();
    std::uint32_t crc = 0;
    for (std::size_t at = 0; at < n; at += chunk) {
      const std::size_t len = std::min(chunk, n - at);
      crc = crc32c(p + at, len, crc);
      if (auto e = f->write(p + at, len)) return e;
    }
    nlohmann::json dims = nlohmann::json::array();
    for (auto d : t.sizes().dims()) dims.push_back(d);
    listed.push_back({{"name", name},
                      {"dtype", std::string(name_of(t.type()))},
                      {"shape", dims},
                      {"offset", offset},
                      {"bytes", n},
                      {"crc32c", hex32(crc)}});
    offset += n;
  }
  const std::string footer = nlohmann::json{{"kind", kind}, {"meta", meta}, {"sections", listed}}.dump();
  unsigned char end[end_bytes] = {};
  put_le(end, footer.size(), 8);
  put_le(end + 8, crc32c(footer.data(), footer.size()), 4);
  put_le(end + 12, tensor_file_version, 4);
  std::memcpy(end + 16, end_magic, 8);
  if (auto e = f->write(footer.data(), footer.size())) return e;
  if (auto e = f->write(end, sizeof end)) return e;
  return f->commit();
}

expected<tensor_file> read_tensor_file(const std::filesystem::path& path, const std::string& kind) {
  const std::string what = path.string();
  auto bad = [&](const std::string& why) { return failure{what + ": " + why}; };
  std::ifstream in(path, std::ios::binary);
  if (!in) return failure{"cannot open " + what + ": " + std::strerror(errno)};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (size < head_bytes + end_bytes) return bad("too short to be a Troupe file (" + std::to_string(size) + " bytes)");
  unsigned char head[head_bytes], end[end_bytes];
  in.seekg(0);
  in.read(reinterpret_cast<char*>(head), head_bytes);
  in.seekg(static_cast<std::streamoff>(size - end_bytes));
  in.read(reinterpret_cast<char*>(end), end_bytes);
  if (!in) return bad("cannot be read");
  if (std::memcmp(head, head_magic, 8) != 0) return bad("not a Troupe file");
  const auto version = static_cast<std::uint32_t>(get_le(head + 8, 4));
  if (version > tensor_file_version)
    return bad("written in format version " + std::to_string(version) + " by a newer Troupe; this one reads " +
               std::to_string(tensor_file_version));
  if (std::memcmp(end + 16, end_magic, 8) != 0 || get_le(end + 12, 4) != version)
    return bad("truncated or damaged: it does not end as a Troupe file does");
  const std::uint64_t footer_bytes = get_le(end, 8);
  if (footer_bytes > max_footer_bytes || footer_bytes > size - head_bytes - end_bytes)
    return bad("damaged: its footer's length is impossible");
  std::string footer(footer_bytes, '\0');
  in.seekg(static_cast<std::streamoff>(size - end_bytes - footer_bytes));
  in.read(footer.data(), static_cast<std::streamsize>(footer_bytes));
  if (!in) return bad("cannot be read");
  if (crc32c(footer.data(), footer.size()) != get_le(end + 8, 4))
    return bad("damaged: its description fails its CRC-32C check");
  nlohmann::json j = nlohmann::json::parse(footer, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kind") || !j["kind"].is_string() ||
      !j.contains("sections") || !j["sections"].is_array())
    return bad("damaged: its description is not what Troupe writes");
  tensor_file out;
  out.kind = j["kind"].get<std::string>();
  if (out.kind != kind) return bad("a " + out.kind + " file, not a " + kind + " file");
  out.meta = j.contains("meta") ? j["meta"] : nlohmann::json::object();
  std::uint64_t expect_offset = head_bytes;
  std::set<std::string> names;
  for (const auto& s : j["sections"]) {
    auto e = entry_of(s);
    if (!e) return bad("damaged: " + e.error().message);
    if (!names.insert(e->name).second) return bad("damaged: two sections are named '" + e->name + "'");
    if (e->offset != expect_offset || e->bytes > size - end_bytes - footer_bytes - e->offset)
      return bad("damaged: section '" + e->name + "' is not where the file's layout puts it");
    tensor t = tensor::uninitialized(e->dims, e->type);
    auto* p = reinterpret_cast<unsigned char*>(t.bytes());
    in.seekg(static_cast<std::streamoff>(e->offset));
    std::uint32_t crc = 0;
    for (std::uint64_t at = 0; at < e->bytes; at += chunk) {
      const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, e->bytes - at));
      in.read(reinterpret_cast<char*>(p + at), static_cast<std::streamsize>(len));
      if (!in) return bad("cannot be read");
      crc = crc32c(p + at, len, crc);
    }
    if (crc != e->crc) return bad("damaged: section '" + e->name + "' fails its CRC-32C check");
    out.sections.emplace_back(e->name, std::move(t));
    expect_offset += e->bytes;
  }
  if (expect_offset != size - end_bytes - footer_bytes)
    return bad("damaged: its sections do not fill the space before its description");
  return out;
}

}  // namespace troupe
