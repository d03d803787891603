// npz_file: .npy headers (format 1.0) and the zip archive's local headers, central
// directory and end record, every entry stored with its CRC-32 (zlib's).
#include "tensor/npz_file.hpp"

#include <zlib.h>

#include <cstdint>
#include <limits>
#include <set>

#include "base/durable_file.hpp"

namespace troupe {

namespace {

constexpr std::uint64_t zip32_limit = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint16_t dos_date_1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01: the archive carries no times

void put(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

std::optional<std::string> descr_of(dtype t) {
  switch (t) {
    case dtype::f32: return "<f4";
    case dtype::i32: return "<i4";
    case dtype::u8: return "|u1";
    default: return std::nullopt;
  }
}

// The .npy format 1.0 header for `t`: magic, version, length, and a dict padded with
// spaces to a multiple of 64 bytes in all, ending in a newline.
std::string npy_header(const const_tensor_view& t, const std::string& descr) {
  std::string dims = "(";
  for (auto d : t.sizes().dims()) dims += std::to_string(d) + ", ";
  if (t.rank() >= 1) dims.erase(dims.size() - (t.rank() == 1 ? 1 : 2));
  dims += ")";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + dims + ", }";
  const std::size_t fixed = 10;  // magic (6), version (2), header length (2)
  dict.append((64 - (fixed + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string h = "\x93NUMPY";
  h.push_back(1);
  h.push_back(0);
  put(h, dict.size(), 2);
  return h + dict;
}

struct entry {
  std::string name, header;
  const_tensor_view data;
  std::uint32_t crc = 0;
  std::uint64_t size = 0, offset = 0;
};

std::string local_header(const entry& e) {
  std::string h;
  put(h, 0x04034b50, 4);
  put(h, 20, 2);  // version needed: 2.0
  put(h, 0, 2);   // flags
  put(h, 0, 2);   // stored
  put(h, 0, 2);   // time
  put(h, dos_date_1980, 2);
  put(h, e.crc, 4);
  put(h, e.size, 4);
  put(h, e.size, 4);
  put(h, e.name.size(), 2);
  put(h, 0, 2);  // no extra field
  return h + e.name;
}

std::string central_header(const entry& e) {
  std::string h;
  put(h, 0x02014b50, 4);
  put(h, 20, 2);  // made by: 2.0
  put(h, 20, 2);  // needed: 2.0
  put(h, 0, 2);
  put(h, 0, 2);
  put(h, 0, 2);
  put(h, dos_date_1980, 2);
  put(h, e.crc, 4);
  put(h, e.size, 4);
  put(h, e.size, 4);
  put(h, e.name.size(), 2);
  put(h, 0, 2);  // extra
  put(h, 0, 2);  // comment
  put(h, 0, 2);  // disk
  put(h, 0, 2);  // internal attributes
  put(h, 0, 4);  // external attributes
  put(h, e.offset, 4);
  return h + e.name;
}

std::uint32_t crc32_of(std::uint32_t crc, const void* data, std::uint64_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const auto len = static_cast<uInt>(std::min<std::uint64_t>(n, 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p, len));
    p += len;
    n -= len;
  }
  return crc;
}

}  // namespace

std::optional<std::string> write_npz(const std::filesystem::path& path,
                                     const std::vector<std::pair<std::string, const_tensor_view>>& arrays) {
  const std::string where = "cannot write " + path.string() + ": ";
  std::vector<entry> entries;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : arrays) {
    if (name.empty() || !names.insert(name).second) return where + "array names must be unique and not empty";
    auto descr = descr_of(t.type());
    if (!descr) return where + "array '" + name + "' is " + std::string(name_of(t.type())) + ", not f32, i32 or u8";
    if (!t.is_contiguous() || t.where().kind != device_kind::cpu)
      return where + "array '" + name + "' is not contiguous in host memory";
    entry e{name + ".npy", npy_header(t, *descr), t, 0, 0, offset};
    e.size = e.header.size() + t.nbytes();
    e.crc = crc32_of(crc32_of(0, e.header.data(), e.header.size()), t.bytes(), t.nbytes());
    offset += local_header(e).size() + e.size;
    if (e.size > zip32_limit || offset > zip32_limit)
      return where + "more than 4 GiB, which .npz without ZIP64 cannot hold; save in Troupe's format instead";
    entries.push_back(std::move(e));
  }
  if (entries.size() > 0xFFFF) return where + "more than 65,535 arrays";
  auto f = durable_file::create(path);
  if (!f) return f.error().message;
  std::string directory;
  for (const auto& e : entries) {
    const std::string h = local_header(e);
    if (auto why = f->write(h.data(), h.size())) return why;
    if (auto why = f->write(e.header.data(), e.header.size())) return why;
    if (auto why = f->write(e.data.bytes(), e.data.nbytes())) return why;
    directory += central_header(e);
  }
  std::string end;
  put(end, 0x06054b50, 4);
  put(end, 0, 2);
  put(end, 0, 2);
  put(end, entries.size(), 2);
  put(end, entries.size(), 2);
  put(end, directory.size(), 4);
  put(end, offset, 4);
  put(end, 0, 2);  // no comment
  if (auto why = f->write(directory.data(), directory.size())) return why;
  if (auto why = f->write(end.data(), end.size())) return why;
  return f->commit();
}

}  // namespace troupe
